// What the ZeRO engine allocates for a configuration, computed without allocating: the
// device bytes (gradients, shards, AdamW states, buckets, gradient scratch, stage-3 gather
// arenas), the host bytes (the offloaded optimizer, its NVMe swap ring) and the NVMe swap
// file. strata plan reports it; ZeroEngine::attach checks its own allocations against it, so
// the two cannot drift apart.
#pragma once
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "zero/partition.h"

namespace strata::zero {

// The engine's per-step device scalars (loss sum, Σ g²).
inline constexpr uint64_t kStepScalarBytes = 2 * 8;

struct ZeroOptions;

struct EngineFootprint {
  uint64_t device = 0, host = 0, nvme = 0;
};

// params: the model's parameter table (units in order); unit_sizes: elements per unit;
// staging_buffer_bytes: the tier manager's staging buffer size (offload chunks).
EngineFootprint engine_footprint(std::vector<ParamSpan> params, const std::vector<int64_t>& unit_sizes, int world,
                                 DType compute, const ZeroOptions& opts, uint64_t staging_buffer_bytes,
                                 uint64_t nvme_block = 4096);

}  // namespace strata::zero
