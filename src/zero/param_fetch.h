// Stage 3 with --offload-param: a unit's compute-dtype shard pieces from their home on the
// host (RAM or an NVMe file) to the device, on the h2d stream. The home is read through
// `read` (run on the h2d stream's thread, in its order). Ranges in the plan's parameter cache
// (plan.cache_lo and up, --offload-param nvme) come from there: a unit's cached range is read
// from the drive on its first fetch since the cache was last invalidated, then copied
// straight out of it; the rest goes through the tier manager's pinned staging buffers.
//
// Shared by the trained parameters' offload (whose cache is invalidated by every update) and
// by frozen weights (whose cache stays valid for the whole run).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "tier/tier_manager.h"
#include "zero/engine_plan.h"
#include "zero/zero_stats.h"

namespace strata::zero {

class ParamFetch {
 public:
  // Shard offsets [lo, hi) of the compute-dtype parameters into host memory at dst.
  using Reader = std::function<void(int64_t lo, int64_t hi, void* dst)>;
  // Allocates the plan's parameter cache (plan.host.param_cache bytes) in host RAM.
  ParamFetch(Backend& backend, tier::TierManager& tiers, const EnginePlan& plan, Reader read, ZeroStats& stats);

  // Shard [lo, hi) to device memory at dst, ordered on the h2d stream. unit: the unit whose
  // shard range holds [lo, hi) (-1: the persistent slices, never cached).
  void fetch(int unit, int64_t lo, int64_t hi, void* dst);
  // The parameters changed: every cached range is read from the drive again.
  void invalidate_cache() { std::fill(cache_loaded_.begin(), cache_loaded_.end(), 0); }

 private:
  char* cache_at(int64_t shard_offset) const;

  Backend& be_;
  tier::TierManager& tiers_;
  const EnginePlan& plan_;
  Reader read_;
  ZeroStats& stats_;
  std::vector<std::unique_ptr<Event>> stage_ev_;          // per staging buffer, reused per use
  std::vector<std::pair<int64_t, int64_t>> stage_range_;  // per staging buffer: the range read into it
  Buffer cache_;
  std::vector<char> cache_loaded_;  // per unit: its cached range's read has been enqueued
};

}  // namespace strata::zero
