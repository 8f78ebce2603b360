#include "zero/footprint.h"

#include <algorithm>
#include <cmath>

#include "zero/bucket_plan.h"
#include "zero/zero_engine.h"

namespace strata::zero {

namespace {
uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }
}  // namespace

// Mirrors ZeroEngine::attach, AdamW and HostOptimizer allocation by allocation.
EngineFootprint engine_footprint(std::vector<ParamSpan> params, const std::vector<int64_t>& unit_sizes, int world,
                                 DType compute, const ZeroOptions& o, uint64_t staging_buffer_bytes,
                                 uint64_t nvme_block) {
  const bool optim = o.stage >= 1, grads_part = o.stage >= 2, params_part = o.stage >= 3;
  const bool mixed = compute != DType::f32;
  const uint64_t esz = dtype_size(compute), gsz = esz;
  for (ParamSpan& p : params) p.persistent = params_part && p.count < o.param_persistence_threshold;
  const PartitionLayout lay(params, world, o.sub_group_size, o.nvme ? 2048 : 16);
  const uint64_t n = uint64_t(lay.model_elements()), shard = uint64_t(lay.shard_elements());
  EngineFootprint f;
  int64_t host_begin = int64_t(shard);
  if (o.offload_optimizer) {
    host_begin = std::clamp<int64_t>(
        int64_t(std::llround((1.0 - o.offload_ratio) * double(shard))) / lay.align() * lay.align(), 0, int64_t(shard));
    if (o.offload_ratio == 1.0) host_begin = 0;
  }
  f.device += 2 * 4 * (optim ? uint64_t(host_begin) : n);  // AdamW m, v
  f.device += kStepScalarBytes;                            // the step's loss and square sum
  const int64_t chunk = std::max<int64_t>(lay.align(), int64_t(staging_buffer_bytes / 4) / lay.align() * lay.align());
  if (o.offload_optimizer) {  // HostOptimizer
    const uint64_t nh = shard - uint64_t(host_begin);
    const bool keep_compute = o.offload_param && mixed;
    const uint64_t copies = o.speculative_step || o.nvme ? 2 : 1;
    f.host += nh * esz;  // host:grads
    if (o.nvme) {
      f.nvme = copies * (3 * round_up(nh * 4, nvme_block) + (keep_compute ? round_up(nh * esz, nvme_block) : 0));
      f.host += 3 * uint64_t(chunk) * (12 + esz) + uint64_t(chunk) * 4;  // swap ring, bounce
    } else {
      f.host += copies * 12 * nh + (keep_compute ? nh * esz : 0);
    }
  }
  if (!grads_part) f.device += n * gsz;  // grads:full
  if (optim) {
    const uint64_t dev = uint64_t(host_begin);
    f.device += dev * gsz + (mixed || o.offload_param ? dev : shard) * 4;  // grad and master shards
    if (mixed && !o.offload_param) f.device += shard * esz;                // compute shard
  }
  const BucketPlan rs(lay, o.reduce_bucket_size), ag(lay, o.allgather_bucket_size);
  int64_t slot = 0;
  if (!optim) {
    if (world > 1) slot = std::min<int64_t>(int64_t(n), std::max<int64_t>(o.reduce_bucket_size, 1));
    if (!mixed) slot = 0;
  } else {
    slot = world * rs.max_width();
    if (!params_part) slot = std::max<int64_t>(slot, (world * ag.max_width() * int64_t(esz) + 3) / 4);
    f.device += uint64_t(rs.max_width()) * 4 * (o.offload_optimizer ? 2 : 1);  // bucket_out
  }
  const uint64_t slots = optim && rs.buckets().size() > 1 ? 2 : 1;
  if (slot > 0) f.device += slots * uint64_t(slot) * 4;
  std::vector<int64_t> sizes = unit_sizes;
  std::sort(sizes.rbegin(), sizes.rend());
  const bool direct_grads = !grads_part && !mixed;
  if (!direct_grads)
    for (size_t i = 0; i < std::min<size_t>(3, sizes.size()); ++i) f.device += round_up(uint64_t(sizes[i]) * 4, 64);
  if (params_part) {
    uint64_t persist = 0, persist_shard = 0;
    for (const SubGroup& g : lay.sub_groups())
      if (g.persistent) persist += uint64_t(g.padded), persist_shard += uint64_t(g.shard);
    f.device += persist * esz;
    const uint64_t slack = uint64_t(world) * uint64_t(lay.align());
    if (o.max_live_params > 0) {
      f.device += uint64_t(o.max_live_params) * esz;
    } else {
      for (size_t i = 0; i < std::min<size_t>(size_t(o.prefetch_depth) + 2, sizes.size()); ++i)
        f.device += round_up((uint64_t(sizes[i]) + slack) * esz, 64);
    }
    if (o.hpz_partition_size > 1 && world > 1)  // the secondary partition: 1/K of the partitioned parameters
      for (const SubGroup& g : lay.sub_groups())
        if (!g.persistent) f.device += uint64_t(g.padded / o.hpz_partition_size) * esz;
    if (o.offload_param) {
      std::vector<std::vector<int>> unit_groups(unit_sizes.size());
      for (size_t g = 0; g < lay.sub_groups().size(); ++g)
        unit_groups[size_t(lay.sub_groups()[g].unit)].push_back(int(g));
      int64_t max_shard = 0;
      for (const auto& gs : unit_groups)
        if (!gs.empty())
          max_shard = std::max(max_shard, lay.shard_offset(gs.back()) + lay.sub_groups()[size_t(gs.back())].shard -
                                              lay.shard_offset(gs.front()));
      f.device += (uint64_t(o.prefetch_depth) + 2) * round_up(uint64_t(max_shard) * esz, 64);
      f.device += persist_shard * esz;
    }
  }
  return f;
}

}  // namespace strata::zero
