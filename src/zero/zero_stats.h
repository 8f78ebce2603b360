// What the ZeRO engine's parts count during a run (reported per step by the trainer).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace strata::zero {

struct ZeroStats {
  int64_t gathers_on_demand = 0, gathers_prefetched = 0;  // stage-3 unit gathers
  int64_t buckets_reduced = 0;
  size_t live_param_high_water = 0;  // bytes of gathered parameters at once (stage 3)
  int64_t speculative_commits = 0, speculative_redos = 0, speculative_discards = 0;
  double blocked_s = 0;  // the compute thread's time waiting on other engines
};

// Runs wait() on the engine's host thread and counts its wall time as blocked.
template <typename F>
decltype(auto) count_blocked(ZeroStats& stats, F&& wait) {
  struct Timer {
    ZeroStats& s;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    ~Timer() { s.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
  } timer{stats};
  return wait();
}

}  // namespace strata::zero
