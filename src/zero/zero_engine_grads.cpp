// ZeroEngine, part 2 of 4: the step's beginning, the gradient hooks (the GradientReducer's)
// and the agreement after backward. Part 1 is zero_engine.cpp.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "zero/zero_engine.h"

namespace strata::zero {

// ---------------------------------------------------------------- gradients

void ZeroEngine::begin_step(const StepPlan& plan) {
  if (offload_) offload_->begin_step(plan);
  be_.fill_zero(scalars_.data(), scalars_.bytes(), be_.compute_stream());
  reducer_->begin_step();
  if (params_) params_->begin_step();
  if (frozen_) frozen_->begin_step();
}

void ZeroEngine::begin_micro(int i, int n) { reducer_->begin_micro(i == n - 1); }

void ZeroEngine::open_grads(int unit) { reducer_->open(unit); }

void ZeroEngine::close_grads(int unit) { reducer_->close(unit); }

ReducedStep ZeroEngine::reduce_gradients(double loss_part, bool stop) {
  reducer_->reduce_after_backward();
  drain();  // every bucket reduced, every 16-bit close accumulated
  reducer_->check_complete();
  // The device's square sum into its scalar, on the compute stream (cs() is drained).
  Stream& compute = be_.compute_stream();
  reducer_->square_sum(scalars_.as<double>() + 1, compute);
  // The step's one read-back: loss and square sum.
  be_.copy_async(host_scalars_, scalars_.data(), 2 * sizeof(double), compute);
  compute.synchronize();
  double sq = host_scalars_[1];
  if (offload_) sq = offload_->add_square_sum(sq);  // the host's part: its chunks' square sums, in chunk order
  // One all-reduce agrees on the loss, the norm, overflow (a non-finite square sum) and stop.
  double v[4] = {host_scalars_[0] + loss_part, sq, std::isfinite(sq) ? 0.0 : 1.0, stop ? 1.0 : 0.0};
  if (distributed()) comm_->all_reduce(std::span<double>(v, 4));
  return {v[0], std::sqrt(v[1]), v[2] > 0 || !std::isfinite(v[1]), v[3] > 0};
}

}  // namespace strata::zero
