#include "zero/step_traffic.h"

#include <algorithm>

namespace strata::zero {

namespace {

// Frozen weights: nothing goes down and nothing is written. Each micro-batch fetches each
// unit's partitioned slices in forward and again in backward, but the embedding in backward
// only when the head is tied to it; the persistent slices were fetched once, when the run
// began. On NVMe the cache holds its units for the whole run, so a step reads from the drive
// only what lies below it. The bound: what the host budget cannot hold is read on every use,
// the budget holding the most-read units first.
StepTraffic frozen_traffic(const EnginePlan& p, int micro_batches) {
  StepTraffic t;
  if (p.device.fetched == 0) return t;  // on the device
  const uint64_t esz = dtype_size(p.compute), micro = uint64_t(std::max(micro_batches, 1));
  const bool nvme = p.host.nvme_bytes > 0;
  uint64_t reads[2] = {0, 0};  // elements read once and twice per micro-batch
  for (int u = 0; u < int(p.unit_groups.size()); ++u) {
    const bool twice = u != 0 || p.embedding_in_backward;
    const uint64_t uses = micro * (twice ? 2 : 1);
    const bool cached = nvme && p.unit_cached(u);
    for (const auto& [a, b] : p.unit_fetch_runs[size_t(u)]) {
      t.h2d += uses * uint64_t(b - a) * esz;
      reads[twice] += uint64_t(b - a);
      const int64_t below = cached ? std::clamp(p.cache_lo, a, b) : b;
      if (nvme) t.n2h += uses * uint64_t(below - a) * esz;
    }
  }
  t.min_h2d = t.h2d;
  if (!nvme) return t;
  uint64_t room = p.cache_room / esz;
  const uint64_t held2 = std::min(room, reads[1]);
  room -= held2;
  const uint64_t held1 = std::min(room, reads[0]);
  t.min_n2h = esz * micro * (2 * (reads[1] - held2) + (reads[0] - held1));
  return t;
}

}  // namespace

StepTraffic step_traffic(const EnginePlan& p, int micro_batches) {
  if (p.frozen) return frozen_traffic(p, micro_batches);
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
