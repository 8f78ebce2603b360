// The PyTorch peer of `strata bench model`: which PyTorch runs it, and one run of
// bench/peer_torch.py (a dtype, eager or torch.compile) with what that PyTorch reports.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace strata::bench {

struct TorchPeer {
  std::string python;   // the interpreter that imports torch
  std::string source;   // "--python", "peers venv (tools/setup-peers.sh)" or "Debian python3-torch"
  std::string version;  // torch.__version__
  bool torch2 = false;  // has torch.compile, SDPA and the fused AdamW
};

// Where tools/setup-peers.sh puts the peers: $STRATA_PEERS, else /opt/strata-peers.
std::string peers_dir();

// --python when given (empty: look); else the venv tools/setup-peers.sh makes
// ($STRATA_PEERS/venv, default /opt/strata-peers/venv); else Debian's python3-torch
// (/usr/bin/python3). nullopt when none of them imports torch.
std::optional<TorchPeer> find_torch_peer(const std::string& python);

struct TorchRunSpec {
  std::string config_path, dtype;  // dtype: f32 | bf16
  bool compile = false;
  int batch = 4, seq_len = 256, steps = 3, warmup = 1, threads = 1;
  std::string openblas_core;  // OPENBLAS_CORETYPE for an OpenBLAS-backed PyTorch ("" = its choice)
};

struct TorchRun {
  double tokens_per_s = -1, step_s = 0;
  nlohmann::json report;  // the script's JSON line: versions, sdpa, adamw, ISA, ...
  std::string error;      // why it produced no figure
  static std::string name(const std::string& dtype, bool compile) { return dtype + (compile ? "+compile" : "+eager"); }
};

TorchRun run_torch_peer(const TorchPeer& peer, const TorchRunSpec& spec);

}  // namespace strata::bench
