// `strata bench model`: throughput of a full training step (forward, backward, AdamW) for a
// GPT-2 or Llama config (GPT-2 small by default), in f32 and bf16, against PyTorch measured in
// the same run, and against the bound of the step's own GEMMs timed alone (gemm_bound.h).
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
  // Precisions PyTorch is also run in. Its bf16 autocast on CPUs without native bf16 is
  // far slower than its f32, so by default only f32 is measured and every strata precision
  // is also compared with PyTorch's fastest run.
  std::string peer_precisions = "f32";
  std::string python = "/usr/bin/python3";
  std::string device = "auto";  // auto | cpu | cuda
};

// Prints a table and ends with one JSON line on stdout. Returns the exit code.
int run_model_bench(const ModelBenchOptions& o);

}  // namespace strata::bench
