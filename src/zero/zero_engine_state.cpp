// ZeroEngine, part 4 of 4: accounting (bytes by kind) and the checkpoint state (ShardState's).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "zero/zero_engine.h"

namespace strata::zero {

size_t ZeroEngine::param_bytes() const {
  return policy_.parameters ? shard_compute_.bytes() + params_->persistent_bytes() : 0;
}

size_t ZeroEngine::grad_bytes() const { return policy_.gradients ? reducer_->shard_bytes() : reducer_->full_bytes(); }

// Stages 1-2 keep a compute shard only to gather from; with a bf16 master its device part
// is the master, an optimizer state (its offloaded part is a copy of the host's master; stage
// 3 counts the whole shard among the parameters, which it also is).
static size_t master16_bytes(bool bf16_master, const StagePolicy& policy, int64_t device_part, DType compute) {
  return bf16_master && !policy.parameters ? size_t(device_part) * dtype_size(compute) : 0;
}

size_t ZeroEngine::optimizer_state_bytes() const {
  return adam_->state_bytes() + shard_master_.bytes() +
         master16_bytes(master_->bf16(), policy_, plan_.host_begin, buf_.compute_dtype);
}

size_t ZeroEngine::host_bytes() const { return host_ ? host_->bytes() : 0; }

std::array<const io::NvmeFile*, 2> ZeroEngine::nvme_files() const {
  return {host_ ? host_->nvme_file() : nullptr, frozen_ ? frozen_->nvme_file() : nullptr};
}

size_t ZeroEngine::comm_buffer_bytes() const {
  return reducer_->buffer_bytes() + (params_ ? params_->buffer_bytes() : 0) +
         (policy_.gradients ? 0 : reducer_->shard_bytes()) +
         (policy_.parameters ? 0
                             : shard_compute_.bytes() -
                                   master16_bytes(master_->bf16(), policy_, plan_.host_begin, buf_.compute_dtype));
}

std::vector<StatePiece> ZeroEngine::state_pieces(int64_t max_count) const { return state_->pieces(max_count); }

void ZeroEngine::read_state(const StatePiece& p, float* out) {
  drain();
  wait_host();
  state_->read(p, out);
}

void ZeroEngine::load_moments(const FlatSource& m, const FlatSource& v) {
  drain();
  wait_host();
  state_->load_moments(m, v);
}

}  // namespace strata::zero
