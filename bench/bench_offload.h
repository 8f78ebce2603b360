// `strata bench offload`: an offloaded training step against the same step with everything
// on the device, on the CPU backend with the device and the host on disjoint CPUs. Prints
// each engine's busy time, the wall time, overlap = max(busy) / wall, and the step-time
// ratio, ending with one JSON line.
//
// --tier nvme: the optimizer (and with --offload-param the parameters) on NVMe in
// --nvme-path, against fio on the same file with the store's request size and queue depth,
// reading and writing at once in the step's proportion: drive_bound_s = the step's bytes ÷
// that bandwidth, drive_ratio = drive_bound_s ÷ the step's wall time; and the CPU Adam's busy
// time against the same step with the states in host RAM.
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
  std::string speculative = "auto";    // auto | true | false, as strata train's --speculative-step
  std::string device = "auto";         // auto | cpu | cuda
  std::string tier = "cpu";            // cpu | nvme: where the offloaded states live
  std::string nvme_path;               // --tier nvme: the swap files' directory
  double grad_clip = -1;               // < 0: 0 in RAM (no redone update), train's 1.0 on NVMe
  long long host_mem = 0;              // the host tier's budget (0: train's default)
  std::string fio = "auto";            // auto | none | path
  long long fio_bytes = 1ll << 30;     // bytes fio reads and writes
  bool baselines = true;  // the device-only (and, with nvme, in-RAM) runs: off for models only the drive holds
};

int run_offload_bench(const OffloadBenchOptions& o);

}  // namespace strata::bench
