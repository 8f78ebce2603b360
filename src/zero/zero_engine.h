// The ZeRO engine: one code path for stages 0-3, driven by a policy saying what is
// partitioned across the data-parallel ranks.
//
//   stage 0: nothing; gradients all-reduced, every rank runs the whole optimizer.
//   stage 1: optimizer states (P_os): gradients reduce-scattered per padded sub-group after
//            backward; AdamW on this rank's shard of master, m and v; shards all-gathered.
//   stage 2: + gradients (P_os+g): the model has no full gradient buffer; each unit's
//            gradients go to a bucket that is reduce-scattered into this rank's gradient
//            shard as soon as the unit's backward ends, then reused.
//   stage 3: + parameters (P_os+g+p): the model has no full parameters; a unit is gathered
//            into a working buffer before its forward/backward (once per pass: the tied
//            embedding serves encoder and LM head from one gather), and after the
//            optimizer only this rank's shard is updated.
// Not yet: communication on a separate stream overlapping compute, prefetching the next
// units, persistent small parameters, and fp16 loss scaling.
#pragma once
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/unit_hooks.h"
#include "zero/adamw.h"
#include "zero/partition.h"

namespace strata::zero {

struct StagePolicy {
  bool optimizer_states, gradients, parameters;  // what is partitioned
  static StagePolicy for_stage(int stage);
};

struct ModelBuffers {
  float* master = nullptr;  // f32 parameters, when the model owns them (stages 0-2)
  float* grads = nullptr;   // f32 gradients, when the model owns them (stages 0-1)
  void* compute = nullptr;  // compute-dtype copy when it differs from master (bf16 runs, stages 0-2)
  DType compute_dtype = DType::f32;
  std::vector<ParamSpan> params;   // the flat parameter table, with units
  std::vector<bool> weight_decay;  // per parameter
};

class ZeroEngine final : public UnitHooks {
 public:
  // comm may be null (one rank, no communication).
  ZeroEngine(Backend& backend, Communicator* comm, int stage, int64_t sub_group_size, AdamWConfig adam);

  // What the model must allocate itself, and the hooks it must call (null below stage 2).
  bool model_owns_params() const { return !policy_.parameters; }
  bool model_owns_grads() const { return !policy_.gradients; }
  // Whether the model keeps a full f32 master besides its compute copy: only when nothing
  // is partitioned, or when the compute copy is the master (f32 runs).
  bool model_owns_master(DType compute) const { return !policy_.optimizer_states || compute == DType::f32; }
  UnitHooks* hooks() { return policy_.gradients ? this : nullptr; }
  // Builds the partition and this rank's shards. The master shard comes from
  // buffers.master when the model has one, else unit by unit from model.init_unit(seed)
  // (never the whole model at once); the model's compute copy is then filled from it.
  void attach(UnitModel& model, ModelBuffers buffers, uint64_t seed);

  int stage() const { return stage_; }
  const PartitionLayout& layout() const { return *layout_; }

  void begin_step();  // zero this rank's gradient shard (stages 2-3)
  // After backward: combine gradients across ranks as the stage says; returns the global
  // gradient norm (for clipping), identical on every rank.
  double reduce_gradients();
  // AdamW on what this rank owns (clip_scale multiplies the gradients), then make every
  // rank's parameters current (stages 0-2) or this rank's shard (stage 3). Returns true if
  // a gradient was non-finite.
  bool step(float lr, float clip_scale, int64_t t);
  // All f32 parameters in model-flat order (tests, export): gathered from the shards.
  void gather_full_params(std::span<float> out);

  // UnitHooks (stages 2-3)
  void begin_pass() override { resident_[0] = resident_[1] = -1; }
  void acquire_params(int unit) override;
  void open_grads(int unit) override;
  void close_grads(int unit) override;

  // Bytes this rank allocated, by kind, beyond the model's own buffers. A shard counts as
  // the model state it holds only when that state is partitioned (stage 2+ gradients,
  // stage 3 parameters); below that the same buffer is communication staging.
  size_t optimizer_state_bytes() const;  // m, v and the master shard
  size_t grad_shard_bytes() const { return policy_.gradients ? shard_grads_.bytes() : 0; }
  size_t param_shard_bytes() const { return policy_.parameters ? shard_compute_.bytes() : 0; }
  size_t comm_buffer_bytes() const;  // staging, buckets, gather buffers and staging shards

 private:
  bool distributed() const { return comm_ && world_ > 1; }
  void publish_params();  // stages 1-2: all-gather the shards into the model's full parameters
  void pack(const float* full, float* padded) const;
  template <typename T>
  void unpack(const T* padded, T* full) const;
  template <typename T>
  void gather_group(const SubGroup& g, int64_t shard_off, const T* shard, T* padded_out);
  int bucket_of(int unit) const { return unit == 0 ? 0 : 1; }

  Backend& be_;
  Communicator* comm_;
  int stage_, rank_ = 0, world_ = 1;
  int64_t sub_group_size_;
  StagePolicy policy_;
  AdamWConfig adam_cfg_;
  UnitModel* model_ = nullptr;
  ModelBuffers buf_;
  std::unique_ptr<PartitionLayout> layout_;
  std::unique_ptr<AdamW> adam_;
  std::vector<AdamW::Group> groups_;           // over the arrays AdamW sees
  std::vector<std::vector<int>> unit_groups_;  // sub-groups of each unit
  Buffer padded_, shard_grads_, shard_master_, shard_compute_, padded_compute_;
  Buffer staging_, staging_out_;  // one sub-group, padded (stages 2-3)
  Buffer bucket_[2];              // unit gradients (2-3): embeddings, others
  Buffer gathered_[2];            // unit parameters (3): embeddings, others
  int resident_[2] = {-1, -1};    // which unit each gather buffer holds now
};

}  // namespace strata::zero
