// `strata bench offload`: an offloaded training step against the same step with everything
// on the device, on the CPU backend with the device and the host on disjoint CPUs. Prints
// each engine's busy time, the wall time, overlap = max(busy) / wall, and the step-time
// ratio, ending with one JSON line.
#pragma once
#include <string>

namespace strata::bench {

struct OffloadBenchOptions {
  std::string model = "configs/bench-offload.json";
  int micro_batch = 1, seq_len = 32;
  int stage = 2;
  std::string precision = "bf16";
  int warmup = 2, steps = 5;
  int device_threads = 1, host_threads = 1;
  long long reduce_bucket_size = 2000000;
  std::string offload_param = "none";  // cpu needs stage 3
  double offload_ratio = 0.85;         // the last-reduced 15% updated on the device after backward
  bool speculative = true;
  std::string device = "auto";  // auto | cpu | cuda
};

int run_offload_bench(const OffloadBenchOptions& o);

}  // namespace strata::bench
