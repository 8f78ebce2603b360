#include "bench/bench_comm.h"

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"

namespace strata::bench {

int run_comm_bench(const CommBenchOptions& o) {
  MpiComm comm({600.0, false});  // no per-call agreement check while timing
  const int N = comm.size(), me = comm.rank();
  const size_t max_count = size_t(o.max_bytes / 4);
  std::vector<float> a(max_count), b(max_count);
  for (size_t i = 0; i < max_count; ++i) a[i] = float(i % 100), b[i] = 0;  // first touch
  struct Op {
    const char* name;
    double factor;                    // busbw / algbw
    std::function<void(size_t)> run;  // count = message size in elements
  };
  const double nn = N;
  std::vector<Op> ops = {
      {"all_reduce", 2.0 * (nn - 1) / nn, [&](size_t c) { comm.all_reduce(std::span<float>(a.data(), c)); }},
      {"reduce_scatter", (nn - 1) / nn,
       [&](size_t c) {
         comm.reduce_scatter(std::span<const float>(a.data(), c), std::span<float>(b.data(), c / size_t(N)));
       }},
      {"all_gather", (nn - 1) / nn,
       [&](size_t c) {
         comm.all_gather(std::span<const float>(b.data(), c / size_t(N)), std::span<float>(a.data(), c));
       }},
      {"broadcast", 1.0, [&](size_t c) { comm.broadcast(std::span<float>(a.data(), c), 0); }},
  };
  if (me == 0) {
    std::printf("bench comm: %d ranks (MPI), host %s; time = slowest rank, best of %d\n", N, comm.host().c_str(),
                o.iters);
    std::printf("%-15s %12s %12s %12s %12s\n", "collective", "bytes", "time us", "algbw GB/s", "busbw GB/s");
  }
  nlohmann::json result = {{"bench", "comm"}, {"ranks", N}, {"results", nlohmann::json::array()}};
  for (const Op& op : ops) {
    double peak_busbw = 0;
    for (long long bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      // Divisible by N for the scattered/gathered collectives.
      const size_t count = std::max<size_t>(size_t(N), size_t(bytes / 4) / size_t(N) * size_t(N));
      for (int w = 0; w < o.warmup; ++w) op.run(count);
      double best = 1e30;
      for (int it = 0; it < o.iters; ++it) {
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        op.run(count);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        comm.all_reduce(std::span<double>(&dt, 1), ReduceOp::max);
        best = std::min(best, dt);
      }
      const double size_bytes = double(count) * 4, algbw = size_bytes / best * 1e-9, busbw = algbw * op.factor;
      peak_busbw = std::max(peak_busbw, busbw);
      if (me == 0) std::printf("%-15s %12.0f %12.1f %12.3f %12.3f\n", op.name, size_bytes, best * 1e6, algbw, busbw);
      result["results"].push_back({{"op", op.name},
                                   {"bytes", size_bytes},
                                   {"time_us", best * 1e6},
                                   {"algbw_gbps", algbw},
                                   {"busbw_gbps", busbw}});
    }
    result[std::string(op.name) + "_peak_busbw_gbps"] = peak_busbw;
  }
  if (me == 0) std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace strata::bench
