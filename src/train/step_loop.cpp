#include "train/step_loop.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "train/stop_signal.h"
#include "zero/partition.h"

namespace strata {

StepLoop::StepLoop(TrainingRun& run)
    : run_(run),
      samples_per_step_(int64_t(run.opts.micro_batch) * run.opts.grad_accum * run.world),
      scaler_({run.opts.precision == DType::f16, run.opts.loss_scale == 0, run.opts.loss_scale,
               run.opts.initial_scale_power, run.opts.loss_scale_window, run.opts.hysteresis, run.opts.min_loss_scale}),
      inputs_(size_t(run.opts.micro_batch) * size_t(run.opts.seq_len)),
      targets_(inputs_.size()),
      positions_(run.data->packed() ? inputs_.size() : 0) {
  if (!run.checkpoint) return;
  const CheckpointManifest& m = run.checkpoint->manifest();
  applied_ = m.applied, base_samples_ = m.samples;
  const nlohmann::json& ls = m.loss_scaler;
  if (run.opts.precision == DType::f16 && ls.contains("scale"))
    scaler_.restore({ls.value("scale", 1.0), ls.value("hysteresis_left", 1), ls.value("iter", int64_t(0)),
                     ls.value("last_overflow", int64_t(-1))});
}

size_t StepLoop::steady_state_allocations() const {
  return run_.backend->budget().allocation_count() - allocations_after_first_;
}

StepTimeline StepLoop::sample() const {
  const zero::ZeroEngine& engine = *run_.engine;
  StepTimeline t;
  t.compute_s = engine.stats().blocked_s + (run_.activations ? run_.activations->blocked_seconds() : 0);  // so far
  t.comm_s = run_.engine->comm_stream() ? run_.engine->comm_stream()->busy_seconds() : 0;
  if (tier::TierManager* tiers = run_.tiers.get()) {
    t.d2h_s = tiers->d2h().busy_seconds(), t.h2d_s = tiers->h2d().busy_seconds();
    t.cpu_adam_s = tiers->host().busy_seconds(), t.host_sum_s = tiers->host_sum().busy_seconds();
    t.d2h_bytes = tiers->bytes(tier::Edge::d2h), t.h2d_bytes = tiers->bytes(tier::Edge::h2d);
  }
  for (const io::NvmeFile* f : run_.engine->nvme_files())
    if (f) t.h2n_bytes += f->bytes_written.load(), t.n2h_bytes += f->bytes_read.load();
  Communicator* comm = run_.comm;
  t.comm_bytes = comm ? comm->counters().bytes_sent : 0;
  t.inter_node_bytes = comm ? comm->counters().inter_node_bytes : 0;
  return t;
}

StepOutcome StepLoop::run_step(int64_t step) {
  using clock = std::chrono::steady_clock;
  const TrainOptions& opts = run_.opts;
  zero::ZeroEngine& engine = *run_.engine;
  Model& model = *run_.model;
  const bool fp16 = opts.precision == DType::f16;
  const auto t0 = clock::now();
  const StepTimeline before = sample();
  const double scale = scaler_.scale();
  // What a speculative offloaded update assumes: this step's lr, t, and no clipping.
  engine.begin_step({float(run_.schedule.at(applied_)), float(1.0 / scale), applied_ + 1});
  // The step's unmasked targets over the global batch, counted alike on every rank.
  const int64_t first = samples_after(step);
  const int64_t step_targets = run_.data->unmasked_targets(first, int(samples_per_step_));
  for (int micro = 0; micro < opts.grad_accum; ++micro) {
    engine.begin_micro(micro, opts.grad_accum);
    // This rank's slice of the step's global batch (the same samples for any world size).
    const int64_t rows = first + zero::first_sample(0, run_.rank, run_.world, opts.micro_batch, opts.grad_accum, micro);
    run_.data->fill(rows, opts.micro_batch, inputs_, targets_, positions_);
    model.set_dropout_rows(opts.seed, rows);  // masks by sample: the same on any world size, after a resume
    model.forward(inputs_, positions_);
    // Each micro-batch's mean loss weighs its share of the step's unmasked targets (for
    // token streams 1/(accum·world)), so the ranks' sum is the global batch's token mean.
    int64_t unmasked = 0;
    for (int32_t t : targets_) unmasked += t >= 0;
    const double share = step_targets ? double(unmasked) / double(step_targets) : 0.0;
    model.backward(targets_, float(scale * share), engine.loss_sum(), share);  // read back once, below
  }
  // Gradients combined across ranks; loss, norm, overflow and a stop asked for on any rank
  // (SIGINT/SIGTERM) agreed in one reduction, so every rank stops after the same step.
  const zero::ReducedStep red = engine.reduce_gradients(0, stop_signal() != 0);
  const double loss = red.loss, lr = run_.schedule.at(applied_);
  double norm = red.grad_norm / scale;
  bool skipped = false;
  if (red.overflow && fp16) {  // skip the update, lower the scale (every rank agrees)
    engine.skip_step();
    skipped = true;
    norm = std::numeric_limits<double>::infinity();
  } else {
    STRATA_CHECK(std::isfinite(loss) && !red.overflow,
                 "step " + std::to_string(step + 1) + " produced a non-finite loss or gradient (loss " +
                     std::to_string(loss) + ", grad norm " + std::to_string(norm) + ")",
                 "lower --lr, keep --grad-clip on, or try --precision f32");
    const double clip = opts.grad_clip > 0 && norm > opts.grad_clip ? opts.grad_clip / norm : 1.0;
    // One fused pass: AdamW on what this rank owns (and, in 16-bit runs, the compute copy),
    // with the gradients unscaled and clipped by one factor.
    engine.step(float(lr), float(clip / scale), ++applied_);
  }
  scaler_.update(red.overflow && fp16);
  const double step_s = std::chrono::duration<double>(clock::now() - t0).count();
  if (step == run_.start_step) allocations_after_first_ = run_.backend->budget().allocation_count();
  StepTimeline tl = sample();
  tl.wall_s = step_s;
  tl.compute_s = std::max(0.0, step_s - (tl.compute_s - before.compute_s));
  tl.comm_s -= before.comm_s, tl.d2h_s -= before.d2h_s, tl.h2d_s -= before.h2d_s;
  tl.cpu_adam_s -= before.cpu_adam_s, tl.host_sum_s -= before.host_sum_s;
  tl.d2h_bytes -= before.d2h_bytes, tl.h2d_bytes -= before.h2d_bytes;
  tl.h2n_bytes -= before.h2n_bytes, tl.n2h_bytes -= before.n2h_bytes;
  tl.comm_bytes -= before.comm_bytes, tl.inter_node_bytes -= before.inter_node_bytes;
  StepRecord rec{step + 1, loss, lr, norm, tokens_per_step() / step_s, step_s * 1e3, scale, skipped, tl};
  rec.useful_tokens_per_s = double(step_targets) / step_s;
  return {rec, red.stop};
}

}  // namespace strata
