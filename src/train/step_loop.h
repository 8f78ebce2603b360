// A training run's optimizer steps: each takes this rank's slice of the global batch in
// micro-batches through forward and backward, lets the engine reduce the gradients and
// agree on loss, norm, overflow and stop, then skips (fp16 overflow) or clips and updates,
// and measures where the step's time and bytes went. The loss scaler, the count of applied
// updates and the samples consumed live here (restored from a checkpoint when resuming).
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "train/loss_scaler.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace strata {

struct StepOutcome {
  StepRecord record;
  bool stop = false;  // some rank was asked to stop (SIGINT/SIGTERM): every rank stops after this step
};

class StepLoop {
 public:
  explicit StepLoop(TrainingRun& run);
  StepOutcome run_step(int64_t step);

  int64_t samples_per_step() const { return samples_per_step_; }
  double tokens_per_step() const { return double(samples_per_step_) * run_.opts.seq_len; }
  int64_t applied() const { return applied_; }  // optimizer updates so far (overflowed fp16 steps apply none)
  // Global samples consumed once `done_steps` steps are done.
  int64_t samples_after(int64_t done_steps) const {
    return base_samples_ + (done_steps - run_.start_step) * samples_per_step_;
  }
  LossScaler::State scaler_state() const { return scaler_.state(); }
  // Device allocations since the end of the first step of this run (must stay 0).
  size_t steady_state_allocations() const;

 private:
  StepTimeline sample() const;  // the engines' cumulative counters, differenced per step

  TrainingRun& run_;
  const int64_t samples_per_step_;
  LossScaler scaler_;
  int64_t applied_ = 0;
  int64_t base_samples_ = 0;  // global samples consumed before this run's first step
  std::vector<int32_t> inputs_, targets_, positions_;
  size_t allocations_after_first_ = 0;
};

}  // namespace strata
