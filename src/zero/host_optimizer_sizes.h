// What a HostOptimizer of `elements` shard offsets allocates in host RAM, and its swap file's
// size: one function for the optimizer and its stores and for EnginePlan (strata plan).
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "zero/zero_options.h"

namespace strata::zero {

struct HostOptimizerSizes {
  int copies = 1;                   // of master, m, v: two when speculating, and always on NVMe
  uint64_t grads = 0;               // accumulated gradients (compute dtype)
  uint64_t states = 0;              // master, m, v in RAM, every copy
  uint64_t compute = 0;             // the 16-bit parameters kept in RAM (stage-3 parameter offload)
  uint64_t swap = 0, bounce = 0;    // NVMe: the ring of three chunk slots; the bounce buffer
  uint64_t region[3] = {0, 0, 0};   // NVMe: bytes of the master's region, of m's (= v's), of the parameters'
  bool keep = false;                // the 16-bit parameters are kept apart from the master
  uint64_t nvme_bytes = 0;          // the swap file
  uint64_t param_cache = 0;         // NVMe parameters: the top of the shard kept in RAM through a step (plan_engine)
  int64_t f32_master_elements = 0;  // parameters without weight decay beside a bf16 master
  // Their f32 masters, every copy, always in RAM.
  uint64_t f32_masters() const { return uint64_t(copies) * uint64_t(f32_master_elements) * 4; }
  uint64_t host_bytes() const { return grads + states + compute + swap + bounce + param_cache + f32_masters(); }
};
// keep_compute: the 16-bit parameters live on the host too (only with a 16-bit compute
// dtype, and apart from the master only when it is f32); nvme_block: the swap file's block
// size (unused without nvme); format: the states' dtypes; f32_master_elements: how many of
// the elements keep an f32 master beside a bf16 one (StateFormat::master_of).
HostOptimizerSizes host_optimizer_sizes(int64_t elements, DType compute_dtype, bool keep_compute, bool speculative,
                                        bool nvme, int64_t chunk_elements, uint64_t nvme_block,
                                        const StateFormat& format = {}, int64_t f32_master_elements = 0);

}  // namespace strata::zero
