// The engine's gradients — always its own, in the gradient dtype (f32, or the compute dtype
// in 16-bit runs) — where they accumulate and how they are combined across ranks:
//
//   stages 0-1: the full gradients. In f32 the model accumulates straight into them; else
//               each unit's f32 scratch is added in at close. After backward, stage 0
//               all-reduces them (in --reduce-bucket-size chunks) and stage 1 packs them
//               into buckets and reduce-scatters each into this rank's shard.
//   stages 2-3: a unit's f32 gradients go to a block of the scratch arena while its
//               backward runs; at close its pieces are packed into the bucket slots, and a
//               bucket that is complete is reduce-scattered into the gradient shard, its
//               host part handed to the OffloadPipeline — on the work stream, while
//               backward continues.
//
// The engine's host thread only decides and enqueues; the scratch block of a closed unit
// is free again once the work stream has consumed it (an event).
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/unit_hooks.h"
#include "zero/engine_plan.h"
#include "zero/offload_pipeline.h"
#include "zero/unit_arena.h"
#include "zero/zero_stats.h"

namespace strata::zero {

class GradientReducer {
 public:
  // comm: null on one rank; work: the stream reductions run on (own_stream: not the compute
  // stream itself); offload: the host part of the shard's pipeline (null: none).
  GradientReducer(Backend& backend, const EnginePlan& plan, const ZeroOptions& options, Communicator* comm, int rank,
                  Stream& work, bool own_stream, OffloadPipeline* offload, ZeroStats& stats);
  // Allocates the plan's gradient buffers, bucket slots and scratch arena.
  void attach(UnitModel& model);

  void begin_step();
  void begin_micro(bool last) { last_micro_ = last; }
  void open(int unit);
  void close(int unit);
  // After the step's backward passes: stage 0's all-reduce, stage 1's reduce-scatters.
  void reduce_after_backward();
  // Once the work stream is drained: every bucket was reduced this step (stages 2-3).
  void check_complete() const;
  // Σ g² of the gradients this rank owns on the device, into the device scalar at sq.
  void square_sum(double* sq, Stream& stream);

  void* full() const { return grads_full_.data(); }                 // stages 0-1
  void* shard() const { return shard_grads_.data(); }               // stages 1-3: the device's part
  float* bucket_memory() const { return bucket_mem_.as<float>(); }  // also stages 1-2's all-gather staging
  size_t full_bytes() const { return grads_full_.bytes(); }
  size_t shard_bytes() const { return shard_grads_.bytes(); }
  size_t buffer_bytes() const { return bucket_mem_.bytes() + bucket_out_.bytes() + grad_scratch_mem_.bytes(); }

 private:
  bool low_precision() const { return plan_.compute != DType::f32; }
  void after_compute();  // later work on the work stream starts after the compute enqueued so far
  float* bucket_slot(int bucket);
  void close_unit_work(int unit, int64_t scratch_offset, bool first);  // stages 0-1, 16-bit
  void reduce_unit_work(int unit, int64_t scratch_offset, bool last);  // stages 2-3
  void reduce_bucket(int bucket, bool last_micro);
  void reduce_stage0();
  void reduce_stage1();

  Backend& be_;
  const EnginePlan& plan_;
  const ZeroOptions& opts_;
  Communicator* comm_;
  const int rank_;
  Stream& work_;
  const bool own_stream_;
  OffloadPipeline* offload_;
  ZeroStats& stats_;
  UnitModel* model_ = nullptr;
  std::unique_ptr<Event> compute_done_;
  bool last_micro_ = true;

  Buffer grads_full_, shard_grads_;  // in the gradient dtype
  Buffer bucket_mem_, bucket_out_;   // one or two bucket slots; reduce-scatter outputs
  int slot_bucket_[2] = {-1, -1};    // which bucket each slot holds
  std::vector<int64_t> remaining_;   // per reduce bucket: elements still to be packed
  std::vector<int> rounds_;          // per reduce bucket: reductions this step
  Buffer grad_scratch_mem_;          // per-unit f32 gradient scratch (arena)
  UnitArena grad_arena_;
  std::vector<int> opens_;                         // per unit: open calls this step
  std::vector<int64_t> grad_block_;                // per unit: its scratch block (bytes into grad_scratch_mem_)
  std::vector<std::unique_ptr<Event>> grad_done_;  // per unit: its scratch has been consumed
};

}  // namespace strata::zero
