// The offloaded part of this rank's optimizer (in host RAM or on NVMe): shard offsets
// [plan.host_begin, shard), cut into chunks that fit a staging buffer. Each reduced bucket's
// chunks travel device→host through the pinned staging pool, are accumulated on the host
// (with their square sums for the norm) and, on the step's last micro-batch, updated by the
// CPU Adam while backward continues (speculatively, see host_optimizer.h), their new
// parameters copied back host→device. After backward the step keeps the speculative
// update, redoes it with the real clip scale, or (overflow) restores the committed copy.
//
// The engine's host thread only takes staging buffers and enqueues: copies on the tier
// streams (d2h, h2d), host work on host_sum and host. Each staging buffer carries a
// StageTask, so the work knows its chunk without packed keys or allocation.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "tier/tier_manager.h"
#include "zero/engine_plan.h"
#include "zero/host_optimizer.h"
#include "zero/param_fetch.h"
#include "zero/zero_stats.h"

namespace strata::zero {

// What the trainer knows before a step's backward (for speculative offloaded updates).
struct StepPlan {
  float lr = 0;
  float grad_scale = 1;  // 1 / loss scale; clipping changes it later
  int64_t t = 1;         // the update this step would apply, from 1
};

class OffloadPipeline {
 public:
  // device_params: where updated parameters go on the device, at shard offset 0 (the
  // compute shard in 16-bit runs, the f32 master mirror in f32 runs); null with
  // --offload-param, whose parameters stay on the host until fetched.
  OffloadPipeline(Backend& backend, tier::TierManager& tiers, const EnginePlan& plan, HostOptimizer& host,
                  void* device_params, ZeroStats& stats);

  void begin_step(const StepPlan& plan);
  // Before a reduction writes the current output slot: work waits for its last copy out.
  int out_slot() const { return out_slot_; }
  void wait_out_slot(Stream& work);
  // Bucket k's host chunks leave its reduced output `out` (bucket-relative) once work has
  // produced it; with `last` (the step's last micro-batch) they are also updated.
  void offload_bucket(int k, const float* out, Stream& work, bool first, bool last);
  // sq plus Σ g² of the host's part, added chunk by chunk in order, once every chunk is
  // accumulated.
  double add_square_sum(double sq);
  // The host part of the step: keep the speculative update when lr, scale and t match the
  // plan, else (re)do it. commit() then makes it the committed state.
  void step(float lr, float grad_scale, int64_t t);
  void commit();
  // An overflowed step: the speculative copy-out is undone.
  void skip();
  // --offload-param: compute-dtype parameters of shard [lo, hi) from the host to device
  // memory at dst (ParamFetch::fetch); the cache is read anew each step.
  void fetch_to_device(int unit, int64_t lo, int64_t hi, void* dst);
  // The host side's queued work done (copies, CPU Adam); flush() also puts its NVMe writes
  // on the drive.
  void wait();
  void flush();
  // After a failed step: lets the queued work finish, dropping its errors.
  void quiesce();

 private:
  struct StageTask {       // what the host work on a staging buffer does (the buffer's until its release)
    int chunk = 0;         // offload: the chunk
    bool first = false;    // accumulate: the step's first micro-batch overwrites
    bool restore = false;  // update: restore the committed copy-out instead (overflow)
    StepPlan plan;         // update: lr, grad scale, t
  };
  int acquire_staging();
  void* device_params_at(int64_t shard_offset) const;
  void offload_chunk(int chunk, const float* bucket_out, bool first, bool last);
  void update_chunk(int chunk, const StepPlan& plan, bool restore);  // after backward
  void update_work(int staging);                                     // on the host stream
  void copy_update_to_device(int chunk, int staging, Event& ev);

  Backend& be_;
  tier::TierManager& tiers_;
  const EnginePlan& plan_;
  HostOptimizer& host_;
  void* device_params_;
  ZeroStats& stats_;
  StepPlan step_plan_;            // what the speculative updates assume
  bool speculated_ = false;       // this step's chunks were updated speculatively
  std::vector<double> chunk_sq_;  // per chunk: Σ g²
  std::unique_ptr<Event> reduced_;
  std::vector<std::unique_ptr<Event>> out_done_;  // per bucket-output slot: its d2h copy is done
  int out_slot_ = 0;
  std::vector<std::unique_ptr<Event>> stage_ev_;  // per staging buffer, reused per use
  std::vector<StageTask> stage_task_;             // per staging buffer
  std::unique_ptr<ParamFetch> fetch_;             // --offload-param
};

}  // namespace strata::zero
