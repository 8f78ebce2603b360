#include "train/evaluator.h"

#include <chrono>
#include <span>

#include "comm/communicator.h"
#include "train/training_run.h"
#include "zero/partition.h"

namespace strata {

Evaluator::Evaluator(TrainingRun& run)
    : run_(run),
      samples_per_batch_(int64_t(run.opts.micro_batch) * run.opts.grad_accum * run.world),
      inputs_(size_t(run.opts.micro_batch) * size_t(run.opts.seq_len)),
      targets_(inputs_.size()),
      positions_(run.eval_data->packed() ? inputs_.size() : 0),
      sum_(run.backend->allocate(sizeof(double), "eval:loss_sum")) {
  const int64_t whole = (run.eval_data->rows() + samples_per_batch_ - 1) / samples_per_batch_;
  batches_ = run.opts.eval_batches > 0 ? std::min(run.opts.eval_batches, whole) : whole;
}

EvalResult Evaluator::evaluate() {
  const auto t0 = std::chrono::steady_clock::now();
  const TrainOptions& opts = run_.opts;
  SampleSource& data = *run_.eval_data;
  Backend& be = *run_.backend;
  const int64_t rows = batches_ * samples_per_batch_;
  const int64_t total = data.unmasked_targets(0, int(rows));  // the same on every rank
  be.fill_zero(sum_.data(), sum_.bytes(), be.compute_stream());
  run_.engine->begin_eval();
  for (int64_t b = 0; b < batches_; ++b)
    for (int micro = 0; micro < opts.grad_accum; ++micro) {
      const int64_t first = b * samples_per_batch_ +
                            zero::first_sample(0, run_.rank, run_.world, opts.micro_batch, opts.grad_accum, micro);
      data.fill(first, opts.micro_batch, inputs_, targets_, positions_);
      // Each micro-batch's mean weighs its share of every target: the sum is the mean over all.
      const int64_t unmasked = data.unmasked_targets(first, opts.micro_batch);
      run_.model->evaluate(inputs_, positions_, targets_, sum_.as<double>(),
                           total ? double(unmasked) / double(total) : 0.0);
    }
  run_.engine->end_eval();
  double loss = 0;
  be.download(&loss, sum_.data(), sizeof loss);
  if (run_.comm && run_.world > 1) run_.comm->all_reduce(std::span<double>(&loss, 1));
  return {loss, total, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace strata
