// `strata bench model`: throughput of a full training step (forward, backward, AdamW) for a
// GPT-2 or Llama config (GPT-2 small by default), in f32 and bf16, against PyTorch measured in
// the same run (torch_peer.h: eager and torch.compile, f32 and bf16 autocast), and against the
// bound of the step's own GEMMs timed alone (gemm_bound.h).
#pragma once
#include <string>

namespace strata::bench {

struct ModelBenchOptions {
  std::string model = "configs/gpt2-small.json";
  int micro_batch = 4, seq_len = 256;
  int warmup = 1, steps = 3;
  int threads = 0;
  std::string precisions = "f32,bf16";
  std::string peer = "auto";  // auto | torch | none
  // Precisions PyTorch runs in. "auto": f32, and bf16 where the CPU has AVX512-BF16 or AMX
  // (elsewhere PyTorch's bf16 autocast is far slower than its f32). Every Strata precision is
  // compared with the fastest PyTorch configuration of its own dtype and of all.
  std::string peer_precisions = "auto";
  // eager, compile (torch.compile), or both ("auto"; compile only on PyTorch 2).
  std::string peer_modes = "auto";
  // The peer's Python; empty: the peers venv of tools/setup-peers.sh, else /usr/bin/python3.
  std::string python;
  std::string device = "auto";  // auto | cpu | cuda
  bool profile = false;         // print the best step's time by op (op_profile.h; CPU only)
};

// Prints a table and ends with one JSON line on stdout. Returns the exit code.
int run_model_bench(const ModelBenchOptions& o);

}  // namespace strata::bench
