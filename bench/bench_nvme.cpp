#include "bench/bench_nvme.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bench/subprocess.h"
#include "core/error.h"
#include "io/nvme_store.h"

namespace strata::bench {

namespace {

double store_bandwidth(io::NvmeFile& f, bool write, long long bytes, long long req, int qd, char* buf) {
  io::NvmeQueue q(f, qd);  // this row's depth: requests in flight at once
  const iovec reg{buf, size_t(req) * size_t(qd)};
  q.register_buffers({&reg, 1});
  std::vector<io::NvmeQueue::Op> ops;
  for (long long at = 0, i = 0; at < bytes; at += req, ++i)
    ops.push_back({write, uint64_t(at), buf + (i % qd) * req, size_t(req)});
  const auto t0 = std::chrono::steady_clock::now();
  q.run(ops);
  if (write) fdatasync(f.fd());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return double(bytes) / s;
}

}  // namespace

std::string find_fio(const std::string& fio) {
  if (fio != "auto") return fio;
  return std::system("command -v fio >/dev/null 2>&1") == 0 ? "fio" : "none";
}

double fio_bandwidth(const std::string& fio, const std::string& file, bool write, long long bytes, long long req,
                     int qd) {
  return fio_mixed_bandwidth(fio, file, write ? 0 : 100, bytes, req, qd);
}

double fio_mixed_bandwidth(const std::string& fio, const std::string& file, int read_percent, long long bytes,
                           long long req, int qd) {
  const bool reads = read_percent > 0, writes = read_percent < 100;
  const std::string rw = !writes ? "read" : !reads ? "write" : "rw --rwmixread=" + std::to_string(read_percent);
  const std::string cmd = fio + " --name=strata --filename=" + file + " --rw=" + rw + " --bs=" + std::to_string(req) +
                          " --iodepth=" + std::to_string(qd) +
                          " --ioengine=io_uring --direct=1 --size=" + std::to_string(bytes) +
                          (writes ? " --end_fsync=1" : "") + " --output-format=json 2>/dev/null";
  const std::string out = run_captured(cmd);
  try {
    const auto j = nlohmann::json::parse(out.substr(out.find('{'))).at("jobs").at(0);
    return (reads ? j.at("read").at("bw_bytes").get<double>() : 0) +
           (writes ? j.at("write").at("bw_bytes").get<double>() : 0);
  } catch (...) {
    return -1;
  }
}

int run_nvme_bench(const NvmeBenchOptions& o) {
  const std::string fio = find_fio(o.fio);
  long long max_req = 0;
  int max_qd = 0;
  for (long long r : o.request_sizes) max_req = std::max(max_req, r);
  for (int q : o.queue_depths) max_qd = std::max(max_qd, q);
  io::NvmeFile f({o.dir, max_qd, size_t(max_req), false}, "strata-bench-" + std::to_string(getpid()) + ".swap",
                 uint64_t(o.bytes));
  char* buf = static_cast<char*>(std::aligned_alloc(f.block_size(), size_t(max_req) * size_t(max_qd)));
  for (size_t i = 0; i < size_t(max_req) * size_t(max_qd); ++i) buf[i] = char(i * 131);
  std::printf("bench nvme: %s (block %zu bytes), %.0f MiB per measurement, peer %s\n", f.path().c_str(), f.block_size(),
              double(o.bytes) / (1 << 20), fio.c_str());
  std::printf("%8s %5s %12s %12s %8s %12s %12s %8s\n", "request", "depth", "write MB/s", "fio write", "ratio",
              "read MB/s", "fio read", "ratio");
  nlohmann::json rows = nlohmann::json::array();
  double log_r = 0, log_w = 0;
  int n_ratio = 0;
  for (long long req : o.request_sizes) {
    for (int qd : o.queue_depths) {
      double w = 0, r = 0, fw = -1, fr = -1;
      for (int k = 0; k < o.repeats; ++k) {
        w = std::max(w, store_bandwidth(f, true, o.bytes, req, qd, buf));
        r = std::max(r, store_bandwidth(f, false, o.bytes, req, qd, buf));
        if (fio != "none") {
          fw = std::max(fw, fio_bandwidth(fio, f.path(), true, o.bytes, req, qd));
          fr = std::max(fr, fio_bandwidth(fio, f.path(), false, o.bytes, req, qd));
        }
      }
      const double rw = fw > 0 ? w / fw : 0, rr = fr > 0 ? r / fr : 0;
      if (rw > 0 && rr > 0) log_w += std::log(rw), log_r += std::log(rr), ++n_ratio;
      std::printf("%7lldM %5d %12.0f %12.0f %8.3f %12.0f %12.0f %8.3f\n", req >> 20, qd, w / 1e6, fw / 1e6, rw, r / 1e6,
                  fr / 1e6, rr);
      rows.push_back({{"request_bytes", req},
                      {"queue_depth", qd},
                      {"write_bps", w},
                      {"read_bps", r},
                      {"fio_write_bps", fw},
                      {"fio_read_bps", fr}});
    }
  }
  std::free(buf);
  nlohmann::json j = {{"bench", "nvme"}, {"file", f.path()}, {"bytes", o.bytes}, {"rows", rows}};
  if (n_ratio) j["read_ratio"] = std::exp(log_r / n_ratio), j["write_ratio"] = std::exp(log_w / n_ratio);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace strata::bench
