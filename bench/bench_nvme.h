// `strata bench nvme`: read and write bandwidth of the NVMe store (io_uring, O_DIRECT) for
// request sizes 1-8 MiB and queue depths 4-64, and — when fio is installed — fio's io_uring
// O_DIRECT bandwidth on the same file with the same parameters, in the same run. Ends with
// one JSON line carrying read_ratio and write_ratio (store ÷ fio, geometric means).
#pragma once
#include <string>
#include <vector>

namespace strata::bench {

struct NvmeBenchOptions {
  std::string dir = ".";
  long long bytes = 512ll << 20;  // per measurement
  std::vector<long long> request_sizes{1 << 20, 2 << 20, 4 << 20, 8 << 20};
  std::vector<int> queue_depths{4, 16, 64};
  std::string fio = "auto";  // auto | none | path
  int repeats = 1;           // best of
};

int run_nvme_bench(const NvmeBenchOptions& o);

// fio (io_uring, O_DIRECT) reading or writing `bytes` of `file` in requests of `req` bytes at
// queue depth qd; bytes/s, or a negative number when it cannot run. fio: auto | none | path.
double fio_bandwidth(const std::string& fio, const std::string& file, bool write, long long bytes, long long req,
                     int qd);
// The same with reads and writes mixed (fio --rw=rw --rwmixread=read_percent): both
// directions' bytes over the run's time.
double fio_mixed_bandwidth(const std::string& fio, const std::string& file, int read_percent, long long bytes,
                           long long req, int qd);
std::string find_fio(const std::string& fio);  // auto → fio when installed, else none

}  // namespace strata::bench
