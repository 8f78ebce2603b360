#include "zero/param_fetch.h"

#include <algorithm>

namespace strata::zero {

ParamFetch::ParamFetch(Backend& backend, tier::TierManager& tiers, const EnginePlan& plan, Reader read,
                       ZeroStats& stats)
    : be_(backend), tiers_(tiers), plan_(plan), read_(std::move(read)), stats_(stats) {
  for (int i = 0; i < tiers_.staging().count(); ++i) stage_ev_.push_back(be_.make_event());
  stage_range_.assign(size_t(tiers_.staging().count()), {0, 0});
  if (plan.host.param_cache > 0) {
    // Not page-locked: it can be most of the host budget, and it is only a copy's source.
    cache_ = tiers.allocate(Tier::host, plan.host.param_cache, "host:param_cache");
    cache_loaded_.assign(plan.unit_groups.size(), 0);
  }
}

char* ParamFetch::cache_at(int64_t shard_offset) const {
  return static_cast<char*>(cache_.data()) + size_t(shard_offset - plan_.cache_lo) * dtype_size(plan_.compute);
}

void ParamFetch::fetch(int unit, int64_t lo, int64_t hi, void* dst) {
  tier::TierManager& tm = tiers_;
  const size_t esz = dtype_size(plan_.compute);
  if (unit >= 0 && hi > plan_.cache_lo && plan_.unit_cached(unit)) {
    // The part in the cache: from the drive into it once (the unit's whole range in one read,
    // in h2d stream order, so every later copy out of it follows the read), then straight
    // from it, no staging.
    const int64_t c = std::max(lo, plan_.cache_lo);
    if (!cache_loaded_[size_t(unit)]) {
      tm.h2d().launch_host([this, unit] {
        const int64_t a = std::max(plan_.unit_shard_begin(unit), plan_.cache_lo);
        read_(a, plan_.unit_shard_end(unit), cache_at(a));
      });
      cache_loaded_[size_t(unit)] = 1;
    }
    be_.copy_async(static_cast<char*>(dst) + size_t(c - lo) * esz, cache_at(c), size_t(hi - c) * esz, tm.h2d());
    tm.count(tier::Edge::h2d, size_t(hi - c) * esz);
    hi = c;  // the rest (a unit the cache holds in part) through the staging buffers
  }
  const int64_t al = plan_.layout.align();
  const int64_t per = std::max<int64_t>(al, int64_t(tm.staging().buffer_bytes() / esz) / al * al);
  for (int64_t a = lo; a < hi; a += per) {
    const int64_t b = std::min(hi, a + per);
    // The engine's host thread waits here when every staging buffer is in the pipeline.
    const int s = count_blocked(stats_, [&] { return tm.staging().acquire(); });
    stage_range_[size_t(s)] = {a, b};
    tm.h2d().launch_host([this, s] {
      const auto [from, to] = stage_range_[size_t(s)];
      read_(from, to, tiers_.staging().data(s));
    });
    be_.copy_async(static_cast<char*>(dst) + size_t(a - lo) * esz, tm.staging().data(s), size_t(b - a) * esz, tm.h2d());
    tm.count(tier::Edge::h2d, size_t(b - a) * esz);
    tm.h2d().record(*stage_ev_[size_t(s)]);
    tm.staging().release_after(s, *stage_ev_[size_t(s)]);
  }
}

}  // namespace strata::zero
