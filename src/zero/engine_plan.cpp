#include "zero/engine_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"

namespace strata::zero {

namespace {
uint64_t round64(uint64_t bytes) { return (bytes + 63) / 64 * 64; }
// --offload-param nvme: the top of the shard, as much as the host budget left by everything
// else holds (in whole alignment blocks, so the drive reads straight into it), stays in host
// RAM through a step. Units' shard ranges ascend with the unit, so that is the last units of
// forward, the first of backward, the lowest of them perhaps only in part.
void plan_param_cache(EnginePlan& p, uint64_t host_free) {
  const uint64_t others = p.host.host_bytes(), esz = dtype_size(p.compute);
  const uint64_t room = host_free > others ? host_free - others : 0;
  p.cache_room = room;
  const int64_t align = p.layout.align(), shard = p.shard_elements();
  const int64_t held = std::min<int64_t>(shard, int64_t(room / esz) / align * align);
  if (held <= 0) return;
  for (size_t u = 1; u < p.unit_groups.size(); ++u)
    STRATA_CHECK(p.unit_groups[u - 1].empty() || p.unit_groups[u].empty() ||
                     p.unit_shard_end(int(u) - 1) <= p.unit_shard_begin(int(u)),
                 "the parameter cache: unit " + std::to_string(u) + "'s shard range",
                 "this is a bug in the partition layout: units' shard ranges must ascend with the unit");
  p.cache_lo = shard - held;
  p.host.param_cache = uint64_t(held) * esz;
}

}  // namespace

StagePolicy StagePolicy::for_stage(int stage) {
  STRATA_CHECK(stage >= 0 && stage <= 3, "--zero-stage " + std::to_string(stage), "stages are 0, 1, 2 and 3");
  return {stage >= 1, stage >= 2, stage >= 3};
}

void check_zero_options(const ZeroOptions& o, int world) {
  const StagePolicy policy = StagePolicy::for_stage(o.stage);
  // Each option's own range is checked where users give it (strata train's option
  // registry, train/option_registry.cpp); here it is only an invariant.
  STRATA_CHECK(o.reduce_bucket_size > 0 && o.allgather_bucket_size > 0 && o.sub_group_size > 0 &&
                   o.prefetch_depth >= 0 && o.param_persistence_threshold >= 0 && o.max_live_params >= 0 &&
                   o.offload_ratio >= 0 && o.offload_ratio <= 1,
               "ZeroOptions out of range", "this is a bug in the caller: strata train's option registry checks them");
  STRATA_CHECK(!o.offload_optimizer || policy.optimizer_states,
               "--offload-optimizer cpu with --zero-stage " + std::to_string(o.stage),
               "offloading the optimizer needs its states partitioned: use --zero-stage 1, 2 or 3");
  STRATA_CHECK(!o.offload_param || policy.parameters,
               "--offload-param cpu with --zero-stage " + std::to_string(o.stage),
               "parameters are offloaded where they are partitioned: use --zero-stage 3");
  STRATA_CHECK(!o.offload_param || (o.offload_optimizer && o.offload_ratio == 1.0),
               "--offload-param cpu without the whole optimizer on the host",
               "add --offload-optimizer cpu (and --offload-ratio 1): the parameters' updates are made on the host");
  // bf16 states live in any tier. A bf16 master is the compute shard, which stage 0 does
  // not have: there the model's own f32 parameters are the master.
  const StateFormat& f = o.states;
  STRATA_CHECK(
      (f.master == DType::f32 || f.master == DType::bf16) && (f.moments == DType::f32 || f.moments == DType::bf16),
      "--master-dtype " + std::string(dtype_name(f.master)) + " / --optimizer-state-dtype " +
          std::string(dtype_name(f.moments)),
      "optimizer states are f32 or bf16");
  STRATA_CHECK(f.master == DType::f32 || policy.optimizer_states,
               "--master-dtype " + std::string(dtype_name(f.master)) + " with --zero-stage 0",
               "a bf16 master is the bf16 shard of partitioned optimizer states: use --zero-stage 1 (on one rank it "
               "partitions nothing and trains the same), or keep --master-dtype f32 (--optimizer-state-dtype bf16 "
               "works at stage 0)");
  const int K = o.hpz_partition_size;
  STRATA_CHECK(K >= 1 && world % K == 0,
               "--hpz-partition-size " + std::to_string(K) + " with " + std::to_string(world) + " ranks",
               "give a number of ranks that divides the world size (usually the ranks per node), or 1 for none");
  STRATA_CHECK(K == 1 || policy.parameters,
               "--hpz-partition-size " + std::to_string(K) + " at stage " + std::to_string(o.stage),
               "the secondary partition is of stage-3 parameters: use --zero-stage 3");
  STRATA_CHECK(K == 1 || !o.offload_param, "--hpz-partition-size with --offload-param",
               "the secondary partition lives on the device beside gathered parameters; drop one of the two");
}

uint64_t EngineDeviceBuffers::total() const {
  return scalars + adam_moments + grads_full + grad_shard + master_shard + compute_shard + bucket_out + buckets +
         grad_scratch + persistent + gathered + secondary + fetched + persistent_staging;
}

int64_t EnginePlan::unit_shard_begin(int unit) const {
  const auto& gs = unit_groups[size_t(unit)];
  return gs.empty() ? 0 : layout.shard_offset(gs.front());
}

int64_t EnginePlan::unit_shard_end(int unit) const {
  const auto& gs = unit_groups[size_t(unit)];
  return gs.empty() ? 0 : layout.shard_offset(gs.back()) + layout.sub_groups()[size_t(gs.back())].shard;
}

std::vector<AdamW::Group> device_groups(const std::vector<AdamW::Group>& groups, const StagePolicy& policy,
                                        int64_t host_begin) {
  std::vector<AdamW::Group> out;
  for (const AdamW::Group& g : groups) {
    const int64_t hi = policy.optimizer_states ? std::min(g.offset + g.count, host_begin) : g.offset + g.count;
    if (hi > g.offset) out.push_back({g.offset, hi - g.offset, g.decay, g.index});
  }
  return out;
}

std::vector<AdamW::Group> optimizer_groups(const PartitionLayout& layout, const StagePolicy& policy, int rank) {
  std::vector<AdamW::Group> groups;
  const std::vector<ParamSpan>& params = layout.params();
  if (!policy.optimizer_states) {
    for (const ParamSpan& q : params) groups.push_back({q.offset, q.count, q.weight_decay, q.offset});
  } else {
    for (const OwnedPiece& piece : layout.owned_pieces(rank))
      groups.push_back({piece.shard_offset, piece.count, params[size_t(piece.param)].weight_decay, piece.flat_begin});
  }
  return groups;
}

namespace {

// Beside a bf16 master, the parameters without weight decay keep an f32 one. The most
// elements of those any rank's optimizer groups hold within shard offsets [lo, hi): the plan
// is every rank's, so its buffers are sized for that rank.
int64_t most_f32_masters(const PartitionLayout& lay, const StagePolicy& pol, int world, const StateFormat& states,
                         int64_t lo, int64_t hi) {
  if (states.master == DType::f32) return 0;
  int64_t most = 0;
  for (int r = 0; r < (pol.optimizer_states ? world : 1); ++r) {  // unpartitioned: every rank alike
    int64_t n = 0;
    for (const AdamW::Group& g : optimizer_groups(lay, pol, r))
      if (states.master_of(g.decay) == DType::f32)
        n += std::max<int64_t>(0, std::min(g.offset + g.count, hi) - std::max(g.offset, lo));
    most = std::max(most, n);
  }
  return most;
}

// The partition layout and what follows from it alone (policy, units, hpZ).
void plan_layout(EnginePlan& p, const EnginePlanInput& in) {
  const ZeroOptions& o = in.options;
  p.policy = StagePolicy::for_stage(o.stage);
  p.world = in.world;
  p.compute = in.compute;
  p.states = o.states;
  p.unit_sizes = in.unit_sizes;
  // Persistence only matters where parameters are partitioned; elsewhere it would only cut
  // sub-groups smaller. NVMe needs every chunk block-aligned in the swap file: sub-groups
  // padded to 2048 elements per rank (8 KiB of f32, 4 KiB of 16-bit) instead of 16.
  std::vector<ParamSpan> params = in.params;
  for (ParamSpan& q : params) q.persistent = p.policy.parameters && q.count < o.param_persistence_threshold;
  p.layout = PartitionLayout(std::move(params), in.world, o.sub_group_size, o.nvme ? 2048 : 16);
  p.unit_groups.assign(in.unit_sizes.size(), {});
  for (size_t g = 0; g < p.layout.sub_groups().size(); ++g)
    p.unit_groups[size_t(p.layout.sub_groups()[g].unit)].push_back(int(g));
  for (int64_t s : in.unit_sizes) p.max_unit = std::max(p.max_unit, s);
  p.hpz = o.hpz_partition_size > 1 && in.world > 1;
}

// Stage 3: the persistent sub-groups (whole), the gather arena (the prefetched units, or
// --max-live-params), hpZ's secondary partition and --offload-param's fetched shards.
void plan_stage3(EnginePlan& p, const EnginePlanInput& in) {
  const ZeroOptions& o = in.options;
  const PartitionLayout& lay = p.layout;
  const uint64_t esz = dtype_size(in.compute);
  const int64_t N = in.world;
  EngineDeviceBuffers& d = p.device;
  std::vector<int64_t> sizes = in.unit_sizes;
  std::sort(sizes.rbegin(), sizes.rend());
  p.persistent_offset.assign(lay.sub_groups().size(), -1);
  int64_t persist = 0, persist_shard = 0;
  for (size_t g = 0; g < lay.sub_groups().size(); ++g)
    if (lay.sub_groups()[g].persistent)
      p.persistent_offset[g] = persist, persist += lay.sub_groups()[g].padded,
      persist_shard += lay.sub_groups()[g].shard;
  d.persistent = uint64_t(persist) * esz;
  p.slack_elements = N * lay.align();
  const uint64_t slack = uint64_t(p.slack_elements);
  if (o.max_live_params > 0) {  // never more than every unit at once (DeepSpeed's 1e9 on a small model)
    uint64_t every_unit = 0;
    for (int64_t s : sizes) every_unit += round64((uint64_t(s) + slack) * esz);
    d.gathered = std::min(uint64_t(o.max_live_params) * esz, every_unit);
  } else {
    for (size_t i = 0; i < std::min<size_t>(size_t(o.prefetch_depth) + 2, sizes.size()); ++i)
      d.gathered += round64((uint64_t(sizes[i]) + slack) * esz);
  }
  const uint64_t need = round64((uint64_t(p.max_unit) + slack) * esz);
  STRATA_CHECK(
      d.gathered >= need,
      "--max-live-params " + std::to_string(o.max_live_params) + " cannot hold the largest unit (" +
          std::to_string(p.max_unit) + " parameters plus " + std::to_string(slack) + " of padding)",
      "raise --max-live-params to at least " + std::to_string(need / esz) + ", or 0 to size it from --prefetch-depth");
  if (p.hpz) {  // 1/K of each partitioned sub-group
    p.secondary_offset.assign(lay.sub_groups().size(), -1);
    int64_t secondary = 0;
    for (size_t g = 0; g < lay.sub_groups().size(); ++g)
      if (!lay.sub_groups()[g].persistent)
        p.secondary_offset[g] = secondary, secondary += lay.sub_groups()[g].padded / o.hpz_partition_size;
    d.secondary = uint64_t(secondary) * esz;
  }
  if (o.offload_param) {  // each gathered unit's shard pieces come host→device first
    int64_t max_shard = 0;
    for (const auto& gs : p.unit_groups)
      if (!gs.empty())
        max_shard = std::max(max_shard, lay.shard_offset(gs.back()) + lay.sub_groups()[size_t(gs.back())].shard -
                                            lay.shard_offset(gs.front()));
    const uint64_t in_flight = std::min<uint64_t>(uint64_t(o.prefetch_depth) + 2, p.unit_groups.size());
    d.fetched = in_flight * round64(uint64_t(max_shard) * esz);
    d.persistent_staging = uint64_t(persist_shard) * esz;
    p.unit_fetch_runs.assign(p.unit_groups.size(), {});
    for (size_t u = 0; u < p.unit_groups.size(); ++u)
      for (int g : p.unit_groups[u]) {
        if (lay.sub_groups()[size_t(g)].persistent) continue;
        const int64_t a = lay.shard_offset(g), b = a + lay.sub_groups()[size_t(g)].shard;
        auto& runs = p.unit_fetch_runs[u];
        if (!runs.empty() && runs.back().second == a)
          runs.back().second = b;
        else
          runs.emplace_back(a, b);
      }
    if (o.nvme) plan_param_cache(p, in.host_free);
  }
}

}  // namespace

// EnginePlanInput::frozen: the shard and the gathers alone.
EnginePlan plan_frozen(const EnginePlanInput& in);

EnginePlan plan_engine(const EnginePlanInput& in) {
  if (in.frozen) return plan_frozen(in);
  const ZeroOptions& o = in.options;
  check_zero_options(o, in.world);
  STRATA_CHECK(o.states.master == DType::f32 || o.states.master == in.compute,
               "--master-dtype " + std::string(dtype_name(o.states.master)) + " with --precision " +
                   std::string(dtype_name(in.compute)),
               "a bf16 master is the bf16 compute copy too: train with --precision bf16, or keep --master-dtype f32");
  EnginePlan p;
  plan_layout(p, in);
  const StagePolicy& pol = p.policy;
  const PartitionLayout& lay = p.layout;
  const bool mixed = in.compute != DType::f32, distributed = in.world > 1;
  const uint64_t esz = dtype_size(in.compute);  // also the gradients' element size
  const uint64_t n = uint64_t(lay.model_elements()), shard = uint64_t(lay.shard_elements());
  EngineDeviceBuffers& d = p.device;

  // Offload: the top offload_ratio of the shard is the host's, the rest the device's (the
  // lowest shard offsets are reduced last in backward: updating them on the device right
  // after backward keeps them off the host's critical path).
  p.host_begin = int64_t(shard);
  if (o.offload_optimizer) {
    p.host_begin = std::clamp<int64_t>(
        int64_t(std::llround((1.0 - o.offload_ratio) * double(shard))) / lay.align() * lay.align(), 0, int64_t(shard));
    if (o.offload_ratio == 1.0) p.host_begin = 0;
  }
  d.adam_moments = 2 * o.states.moment_bytes() * uint64_t(p.device_adam_elements());
  // The device's part of the shard: below host_begin (all of it when the states are not partitioned).
  const int64_t device_f32_masters = most_f32_masters(
      lay, pol, in.world, o.states, 0, pol.optimizer_states ? p.host_begin : std::numeric_limits<int64_t>::max());
  // Host chunks fit a staging buffer of f32 gradients, on the layout's alignment (NVMe needs it).
  p.chunk_elements = std::max<int64_t>(lay.align(), int64_t(in.staging_buffer_bytes / 4) / lay.align() * lay.align());
  if (o.offload_optimizer) {
    const int64_t f32_masters = most_f32_masters(lay, pol, in.world, o.states, p.host_begin, int64_t(shard));
    p.host = host_optimizer_sizes(int64_t(shard) - p.host_begin, in.compute, o.offload_param, o.speculative_step,
                                  o.nvme, p.chunk_elements, in.nvme_block, o.states, f32_masters);
  }

  // Gradients: full (stages 0-1; f32 runs without partitioning write them in place), and
  // the device's part of the shard with its master. In f32 runs the master doubles as the
  // compute shard, so it spans the whole shard unless parameters live on the host; the
  // 16-bit compute shard likewise. A bf16 master is the compute shard: beside it only the
  // f32 masters of the parameters without weight decay.
  if (!pol.gradients) d.grads_full = n * esz;
  p.direct_grads = !pol.gradients && !mixed;
  if (pol.optimizer_states) {
    const uint64_t dev = uint64_t(p.host_begin);
    d.grad_shard = dev * esz;
    d.master_shard =
        o.states.master != DType::f32 ? uint64_t(device_f32_masters) * 4 : (mixed || o.offload_param ? dev : shard) * 4;
    if (mixed && !o.offload_param) d.compute_shard = shard * esz;
  }

  // Buckets: the reduce plan (all stages but 0, whose all-reduce is chunked by the same
  // size) and the all-gather plan (stages 1-2). A second slot only matters when one bucket
  // can be waiting for pieces while another fills: never with a single bucket.
  p.reduce = BucketPlan(lay, o.reduce_bucket_size);
  p.gather = BucketPlan(lay, o.allgather_bucket_size);
  const int64_t N = in.world;
  if (!pol.optimizer_states) {
    if (distributed && mixed) p.bucket_slot_elements = std::min<int64_t>(int64_t(n), o.reduce_bucket_size);
  } else {
    p.bucket_slot_elements = N * p.reduce.max_width();
    if (!pol.parameters)
      p.bucket_slot_elements =
          std::max<int64_t>(p.bucket_slot_elements, (N * p.gather.max_width() * int64_t(esz) + 3) / 4);
    // Two output slots when offloading, so a bucket's reduction can start while the last
    // one's output is still being copied to the host.
    d.bucket_out = uint64_t(p.reduce.max_width()) * 4 * (o.offload_optimizer ? 2 : 1);
  }
  p.bucket_slots = pol.optimizer_states && p.reduce.buckets().size() > 1 ? 2 : 1;
  d.buckets = uint64_t(p.bucket_slots) * uint64_t(p.bucket_slot_elements) * 4;
  if (o.offload_optimizer) {
    p.bucket_chunks.assign(p.reduce.buckets().size(), {});
    for (size_t k = 0; k < p.reduce.buckets().size(); ++k) {
      const Bucket& b = p.reduce.buckets()[k];
      for (int64_t a = std::max(b.lo, p.host_begin); a < b.hi; a += p.chunk_elements) {
        p.bucket_chunks[k].push_back(int(p.chunks.size()));
        p.chunks.push_back({int(k), a, std::min(b.hi, a + p.chunk_elements)});
      }
    }
  }

  // Per-unit gradient scratch (f32) for whatever the model cannot write in place: the
  // embeddings (open through the whole backward) plus two more units in flight.
  std::vector<int64_t> sizes = in.unit_sizes;
  std::sort(sizes.rbegin(), sizes.rend());
  if (!p.direct_grads)
    for (size_t i = 0; i < std::min<size_t>(3, sizes.size()); ++i) d.grad_scratch += round64(uint64_t(sizes[i]) * 4);

  if (pol.parameters) plan_stage3(p, in);
  return p;
}

EnginePlan plan_frozen(const EnginePlanInput& in) {
  const ZeroOptions& o = in.options;
  STRATA_CHECK(o.stage == 3, "frozen weights planned at stage " + std::to_string(o.stage),
               "this is a bug in the caller: frozen weights are partitioned at stage 3 only");
  STRATA_CHECK(o.hpz_partition_size == 1, "frozen weights planned with a secondary partition",
               "this is a bug in the caller: frozen weights are gathered across all ranks");
  EnginePlan p;
  p.frozen = true;
  p.embedding_in_backward = in.embedding_in_backward;
  plan_layout(p, in);
  p.device.scalars = 0;
  const uint64_t bytes = uint64_t(p.shard_elements()) * dtype_size(in.compute);
  if (!o.offload_param)
    p.device.compute_shard = bytes;
  else if (!o.nvme)
    p.host.compute = bytes;
  else
    p.host.nvme_bytes = (bytes + in.nvme_block - 1) / in.nvme_block * in.nvme_block;
  plan_stage3(p, in);
  return p;
}

}  // namespace strata::zero
