// DeepSpeed's ZeRO defaults, written once: the engine's options, the trainer's, the
// planner's input and the CLI's defaults all take them from here.
#pragma once
#include <cstdint>

namespace strata::zero {

inline constexpr int64_t kDefaultBucketElements = 500000000;     // reduce_bucket_size, allgather_bucket_size
inline constexpr int64_t kDefaultSubGroupSize = 1000000000;      // sub_group_size
inline constexpr int64_t kDefaultPersistenceThreshold = 100000;  // stage3_param_persistence_threshold

}  // namespace strata::zero
