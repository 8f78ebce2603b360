#include "zero/step_traffic.h"

#include <algorithm>

namespace strata::zero {

StepTraffic step_traffic(const EnginePlan& p, int micro_batches) {
  StepTraffic t;
  if (p.chunks.empty()) return t;  // nothing offloaded
  const uint64_t esz = dtype_size(p.compute), micro = uint64_t(std::max(micro_batches, 1)), passes = 2 * micro;
  const bool params = p.device.fetched > 0;  // --offload-param
  const bool nvme = p.host.nvme_bytes > 0, keep = params && p.host.keep;
  const uint64_t state = p.states.master_bytes() + 2 * p.states.moment_bytes();  // master, m, v per element
  uint64_t host = 0;                                                             // elements the CPU Adam updates
  for (const HostChunk& c : p.chunks) host += uint64_t(c.hi - c.lo);
  // Each micro-batch's reduced gradients come down in f32; the updated parameters go back up
  // once (to the compute shard, or the f32 master mirror), unless the host keeps them.
  t.d2h = micro * host * 4;
  t.min_d2h = micro * host * esz;
  if (!params) t.h2d = t.min_h2d = host * esz;
  if (nvme) t.n2h = t.h2n = t.min_n2h = t.min_h2n = state * host;  // master, m, v: read, updated, written
  if (nvme && keep) t.h2n += esz * host, t.min_h2n += esz * host;  // the new 16-bit parameters
  if (!params) return t;
  // Stage 3 with --offload-param: each pass fetches each unit's partitioned slices, and the
  // step's end the persistent slices once. On NVMe the cached part of a unit is read once a
  // step (its whole range, in one read), the rest once a pass.
  uint64_t partitioned = 0;  // elements fetched each pass (the persistent ones stay on the device)
  for (int u = 0; u < int(p.unit_groups.size()); ++u) {
    const bool cached = nvme && p.unit_cached(u);
    if (cached) t.n2h += uint64_t(p.unit_shard_end(u) - std::max(p.unit_shard_begin(u), p.cache_lo)) * esz;
    for (const auto& [a, b] : p.unit_fetch_runs[size_t(u)]) {
      t.h2d += passes * uint64_t(b - a) * esz;
      partitioned += uint64_t(b - a);
      const int64_t below = cached ? std::clamp(p.cache_lo, a, b) : b;  // the part not in the cache
      if (nvme) t.n2h += passes * uint64_t(below - a) * esz;
    }
  }
  t.h2d += p.device.persistent_staging;
  t.min_h2d = t.h2d;
  if (!nvme) return t;
  t.n2h += p.device.persistent_staging;
  // The bound: every parameter read once, and the partitioned ones again in each later pass
  // for what the host budget left over cannot hold.
  const uint64_t held = std::min<uint64_t>(partitioned, p.cache_room / esz);
  t.min_n2h += esz * (host + (passes - 1) * (partitioned - held));
  return t;
}

}  // namespace strata::zero
