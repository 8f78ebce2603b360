// Everything the ZeRO engine will allocate and how it cuts its work, computed once from the
// model's parameter table and the options, without allocating any memory the engine uses:
// ZeroEngine::attach allocates exactly these buffers, and strata plan reports their sum, so
// the plan and the run cannot drift apart (attach checks the budgets against it as well).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "zero/bucket_plan.h"
#include "zero/host_optimizer.h"
#include "zero/partition.h"
#include "zero/zero_options.h"

namespace strata::zero {

// The engine's per-step device scalars (loss sum, Σ g²).
inline constexpr uint64_t kStepScalarBytes = 2 * 8;

struct EnginePlanInput {
  std::vector<ParamSpan> params;    // the model's parameter table (units in order)
  std::vector<int64_t> unit_sizes;  // elements per unit
  int world = 1;
  DType compute = DType::f32;
  ZeroOptions options;
  uint64_t staging_buffer_bytes = 0;  // the tier manager's staging buffers (offload chunks)
  uint64_t nvme_block = 4096;         // the swap file's block size
  // Host RAM the engine may use (the host tier's budget left when it plans): what its other
  // host buffers leave of it becomes the parameter cache of --offload-param nvme.
  uint64_t host_free = UINT64_MAX;
  // Weights that are not trained (the base under low-rank adapters), at stage 3: their
  // compute-dtype shard (on the device, or with --offload-param in host RAM or on NVMe, as
  // options.nvme says), the gathers and nothing else — no gradient, bucket or optimizer state.
  bool frozen = false;
  // Frozen weights: whether a backward reads unit 0 (the embedding learns nothing, so only a
  // head tied to it does).
  bool embedding_in_backward = true;
};

// Device buffers, in bytes (0: not allocated).
struct EngineDeviceBuffers {
  uint64_t scalars = kStepScalarBytes;  // the step's loss sum and Σ g²
  uint64_t adam_moments = 0;            // AdamW's m and v of the device's part
  uint64_t grads_full = 0;              // stages 0-1: the whole model's gradients
  uint64_t grad_shard = 0, master_shard = 0, compute_shard = 0;
  uint64_t bucket_out = 0, buckets = 0;          // reduce-scatter outputs; bucket slots
  uint64_t grad_scratch = 0;                     // per-unit f32 gradient scratch (arena)
  uint64_t persistent = 0;                       // stage 3: persistent sub-groups, whole
  uint64_t gathered = 0;                         // stage 3: the gather arena
  uint64_t secondary = 0;                        // stage 3 hpZ: the secondary partition
  uint64_t fetched = 0, persistent_staging = 0;  // stage 3 --offload-param: shard pieces on the device
  uint64_t total() const;
};

struct EnginePlan {
  StagePolicy policy{};
  int world = 1;
  DType compute = DType::f32;                 // also the gradients' dtype
  StateFormat states;                         // the host optimizer's state dtypes
  PartitionLayout layout;                     // params marked persistent where stage 3 keeps them whole
  BucketPlan reduce, gather;                  // reduce-scatter (and stage-0 all-reduce) / stage 1-2 all-gather
  std::vector<std::vector<int>> unit_groups;  // sub-groups of each unit, ascending
  std::vector<int64_t> unit_sizes;
  int64_t max_unit = 0;  // elements of the largest unit
  bool hpz = false;      // a secondary partition (hpz_partition_size > 1 on more than one rank)

  // Offload: shard offsets [host_begin, shard) are the host's, cut into chunks that fit a
  // staging buffer, each within one reduce bucket.
  int64_t host_begin = 0;
  int64_t chunk_elements = 0;
  std::vector<HostChunk> chunks;
  std::vector<std::vector<int>> bucket_chunks;  // per reduce bucket
  HostOptimizerSizes host;                      // zero without offload
  // --offload-param: per unit, the shard ranges a gather needs fetched — its partitioned
  // sub-groups' slices, adjacent ones merged (persistent ones come from their own buffer).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> unit_fetch_runs;
  // --offload-param nvme: shard offsets [cache_lo, shard) keep their parameters in host RAM
  // (host.param_cache bytes) from their first fetch of a step to its end, so they are read
  // from the drive once per step, not once per pass. The last units of forward are the first
  // of backward: the cache is the top of the shard, as much as the host budget holds.
  int64_t cache_lo = 0;
  uint64_t cache_room = 0;  // the host budget left for it (what the traffic's lower bound may assume)
  // Whether a unit's fetch reaches into the cache (its last run ends above cache_lo).
  bool unit_cached(int unit) const {
    if (host.param_cache == 0) return false;
    const auto& runs = unit_fetch_runs[size_t(unit)];
    return !runs.empty() && runs.back().second > cache_lo;
  }

  bool frozen = false;                // EnginePlanInput::frozen
  bool embedding_in_backward = true;  // EnginePlanInput::embedding_in_backward
  bool direct_grads = false;          // stages 0-1 in f32: the model writes the full gradients itself
  int64_t bucket_slot_elements = 0;   // f32 elements per bucket slot
  int bucket_slots = 1;
  std::vector<int64_t> persistent_offset;  // stage 3: per sub-group, into the persistent buffer (-1: none)
  std::vector<int64_t> secondary_offset;   // hpZ: per sub-group, into the secondary partition (-1: none)
  int64_t slack_elements = 0;              // padding a gathered sub-group may write past its unit
  EngineDeviceBuffers device;

  int64_t shard_elements() const { return layout.shard_elements(); }
  // Elements AdamW updates on the device: the whole model at stage 0, the device's part of
  // the shard above.
  int64_t device_adam_elements() const { return policy.optimizer_states ? host_begin : layout.model_elements(); }
  // A unit's contiguous range of this rank's shard (its sub-groups' slices).
  int64_t unit_shard_begin(int unit) const;
  int64_t unit_shard_end(int unit) const;
  uint64_t device_bytes() const { return device.total(); }
  // Frozen weights with --offload-param cpu keep their shard in host.compute; on NVMe their
  // file is host.nvme_bytes.
  uint64_t host_bytes() const { return host.host_bytes(); }
  uint64_t nvme_bytes() const { return host.nvme_bytes; }
};

// One of the plan's device buffers (none when its size is 0), zeroed on the compute stream
// when asked: the engine's parts allocate through this and nothing else.
inline Buffer allocate_planned(Backend& be, uint64_t bytes, const char* name, bool zero = false) {
  if (bytes == 0) return Buffer{};
  Buffer b = be.allocate(size_t(bytes), name);
  if (zero) be.fill_zero(b.data(), b.bytes(), be.compute_stream());
  return b;
}

// Rank `rank`'s AdamW groups in shard offsets (the model's parameters by flat offset at
// stage 0), each with its weight decay and model-flat index: the engine's optimizer groups.
std::vector<AdamW::Group> optimizer_groups(const PartitionLayout& layout, const StagePolicy& policy, int rank);

// The part of each group the device's AdamW updates: shard offsets below host_begin at
// stages 1-3, everything at stage 0.
std::vector<AdamW::Group> device_groups(const std::vector<AdamW::Group>& groups, const StagePolicy& policy,
                                        int64_t host_begin);

// Checks the options (check_zero_options) and what they need of the model (the gather
// arena must hold the largest unit), then sizes everything.
EnginePlan plan_engine(const EnginePlanInput& in);

}  // namespace strata::zero
