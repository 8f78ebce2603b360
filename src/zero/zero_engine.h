// The ZeRO engine: one code path for the stages, driven by a policy saying what is
// partitioned across the data-parallel ranks.
//
// Implemented now: stage 0 (nothing partitioned: gradients all-reduced, every rank runs
// the whole optimizer) and stage 1 (optimizer states partitioned, P_os: gradients
// reduce-scattered over the padded sub-groups of PartitionLayout, each rank runs AdamW on
// its own shard — master, m and v — and the updated parameters are all-gathered). Stages
// 2 and 3 (gradients and parameters partitioned during backward/forward) are refused with
// a clear error until they land.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "zero/adamw.h"
#include "zero/partition.h"

namespace strata::zero {

struct StagePolicy {
  bool optimizer_states, gradients, parameters;  // what is partitioned
  static StagePolicy for_stage(int stage);
};

struct ModelBuffers {
  float* master;          // f32 parameters (full; the owned shard is what stage >= 1 keeps current)
  float* grads;           // f32 gradients (full, as the model's backward writes them)
  void* compute;          // compute-dtype copy (bf16), or nullptr when it is the master itself
  DType compute_dtype;    // f32 when compute is nullptr
  std::vector<ParamSpan> params;       // the flat parameter table
  std::vector<bool> weight_decay;      // per parameter
};

class ZeroEngine {
 public:
  // comm may be null (one rank, no communication).
  ZeroEngine(Backend& backend, Communicator* comm, int stage, int64_t sub_group_size, ModelBuffers model,
             AdamWConfig adam);

  int stage() const { return stage_; }
  const PartitionLayout& layout() const { return layout_; }

  // After backward: combine gradients across ranks as the stage says; returns the global
  // gradient norm (for clipping), identical on every rank.
  double reduce_gradients();
  // AdamW on what this rank owns (clip_scale multiplies the gradients), then make every
  // rank's full parameters current. Returns true if a gradient was non-finite.
  bool step(float lr, float clip_scale, int64_t t);

  // Bytes this rank allocated, by kind, beyond the model's own buffers.
  size_t optimizer_state_bytes() const;  // m, v and the master shard
  size_t grad_shard_bytes() const { return shard_grads_.bytes(); }
  size_t param_shard_bytes() const { return shard_compute_.bytes(); }
  size_t comm_buffer_bytes() const { return padded_.bytes() + padded_compute_.bytes(); }

 private:
  void pack(const float* full, float* padded) const;      // model-flat -> padded layout
  void unpack(const float* padded, float* full) const;    // padded -> model-flat
  template <typename T>
  void unpack_typed(const T* padded, T* full) const;

  Backend& be_;
  Communicator* comm_;
  int stage_, rank_ = 0, world_ = 1;
  StagePolicy policy_;
  ModelBuffers model_;
  PartitionLayout layout_;
  AdamW adam_;
  std::vector<AdamW::Group> groups_;  // over the arrays AdamW sees (full model, or this rank's shard)
  Buffer padded_, shard_grads_, shard_master_, shard_compute_, padded_compute_;
};

}  // namespace strata::zero
