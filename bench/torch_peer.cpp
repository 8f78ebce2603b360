#include "bench/torch_peer.h"

#include <cstdlib>
#include <filesystem>

#include "bench/subprocess.h"
#include "train/trainer.h"

namespace strata::bench {

namespace {

// torch.__version__ of `python`, or "" when it cannot import torch.
std::string torch_version(const std::string& python) {
  if (!std::filesystem::exists(python)) return {};
  std::string v = run_captured(python + " -c 'import torch; print(torch.__version__)' 2>/dev/null");
  while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
  return v.find('\n') == std::string::npos ? v : std::string();
}

}  // namespace

std::string peers_dir() {
  const char* dir = std::getenv("STRATA_PEERS");
  return dir && *dir ? std::string(dir) : std::string("/opt/strata-peers");
}

std::optional<TorchPeer> find_torch_peer(const std::string& python) {
  auto make = [](const std::string& py, const char* source) -> std::optional<TorchPeer> {
    const std::string v = torch_version(py);
    if (v.empty()) return std::nullopt;
    return TorchPeer{py, source, v, v.rfind("1.", 0) != 0};
  };
  if (!python.empty()) return make(python, "--python");
  if (auto p = make(peers_dir() + "/venv/bin/python", "peers venv (tools/setup-peers.sh)")) return p;
  return make("/usr/bin/python3", "Debian python3-torch");
}

TorchRun run_torch_peer(const TorchPeer& peer, const TorchRunSpec& s) {
  const std::string script = resolve_resource("bench/peer_torch.py");
  const std::string cmd = (s.openblas_core.empty() ? "" : "OPENBLAS_CORETYPE=" + s.openblas_core + " ") +
                          "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 OMP_NUM_THREADS=" + std::to_string(s.threads) + " " +
                          peer.python + " " + script + " --config " + s.config_path + " --batch " +
                          std::to_string(s.batch) + " --seq-len " + std::to_string(s.seq_len) + " --steps " +
                          std::to_string(s.steps) + " --warmup " + std::to_string(s.warmup) + " --dtype " + s.dtype +
                          " --threads " + std::to_string(s.threads) + (s.compile ? " --compile" : "") + " 2>&1";
  const std::string out = run_captured(cmd);
  TorchRun r;
  const auto last = out.find_last_of('{');
  try {
    if (last == std::string::npos) throw std::runtime_error("no JSON");
    r.report = nlohmann::json::parse(out.substr(last));
    r.tokens_per_s = r.report.at("tokens_per_s").get<double>();
    r.step_s = r.report.at("step_s").get<double>();
  } catch (...) {
    r.tokens_per_s = -1;
    const size_t from = out.size() > 600 ? out.size() - 600 : 0;  // the traceback's end says why
    r.error = "peer failed: " + out.substr(from);
  }
  return r;
}

}  // namespace strata::bench
