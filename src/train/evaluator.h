// Validation during training: the held-out set (--eval-fraction) or --eval-data, evaluated
// forward only after the steps --eval-every names and after the last one. An evaluation
// reads --eval-batches global batches (0: the whole set) laid out as training lays out a
// step's batch (each rank its block of micro-batches), so it is the same on any rank count;
// rows past the set's end are empty and count nothing. The loss is the mean over every
// unmasked target of those rows, masked exactly as training masks it.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/buffer.h"

namespace strata {

class TrainingRun;

struct EvalResult {
  double loss = 0;     // mean over the targets
  int64_t tokens = 0;  // targets counted
  double seconds = 0;
};

class Evaluator {
 public:
  // Sizes its host buffers and its device scalar once (before the first step).
  explicit Evaluator(TrainingRun& run);
  // Collective: every rank evaluates its part and the loss is summed across ranks.
  EvalResult evaluate();
  int64_t batches() const { return batches_; }
  // Whether an evaluation follows the step that completes `done_steps` of `steps`.
  static bool due(int64_t done_steps, int64_t steps, int64_t every) {
    return done_steps == steps || (every > 0 && done_steps % every == 0);
  }

 private:
  TrainingRun& run_;
  const int64_t samples_per_batch_;
  int64_t batches_;
  std::vector<int32_t> inputs_, targets_, positions_;
  Buffer sum_;  // the device f64 the micro-batches' weighted losses add into
};

}  // namespace strata
