#include "train/trainer.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/evaluator.h"
#include "train/step_loop.h"
#include "train/step_report.h"
#include "train/stop_signal.h"
#include "train/training_run.h"

#ifndef STRATA_SOURCE_DIR
#define STRATA_SOURCE_DIR "."
#endif

namespace strata {

double StepTimeline::overlap() const {
  const double busiest = std::max({compute_s, comm_s, d2h_s, h2d_s, cpu_adam_s, host_sum_s});
  return wall_s > 0 ? busiest / wall_s : 0;
}

std::string resolve_resource(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::exists(path) || fs::path(path).is_absolute()) return path;
  const fs::path in_source = fs::path(STRATA_SOURCE_DIR) / path;
  return fs::exists(in_source) ? in_source.string() : path;
}

std::string resolve_model(const std::string& name_or_path) {
  const std::string path = resolve_resource(name_or_path);
  if (std::filesystem::exists(path) || name_or_path.find(".json") != std::string::npos) return path;
  const std::string named = resolve_resource("configs/bench/" + name_or_path + ".json");
  return std::filesystem::exists(named) ? named : path;
}

// Setup (TrainingRun), the step loop (StepLoop) and the reporters (StepReporter,
// checkpoints), top to bottom.
TrainResult train(const TrainOptions& opts, const TrainContext& context) {
  validate_options(opts);
  const auto t_start = std::chrono::steady_clock::now();
  TrainResult result;
  TrainingRun run(opts, context);
  if (run.finished) {  // the checkpoint in --out is at or past --steps
    result.already_complete = true;
    result.resumed_from = run.checkpoint->manifest().step;
    return result;
  }
  result.resumed_from = run.start_step;
  StepLoop loop(run);
  std::unique_ptr<Evaluator> evaluator;  // sized before the first step: nothing allocates in the steady state
  if (run.eval_data) evaluator = std::make_unique<Evaluator>(run);
  StepReporter report(run, loop.tokens_per_step(), result);
  const auto save = [&](int64_t done_steps) {
    report.sync();  // the metrics log holds every step the checkpoint covers
    run.save_checkpoint(done_steps, loop.applied(), loop.samples_after(done_steps), loop.scaler_state());
  };
  result.steps.reserve(size_t(opts.steps));  // no host allocation inside the step either
  try {
    for (int64_t step = run.start_step; step < opts.steps; ++step) {
      if (context.on_step_begin) context.on_step_begin(step);
      StepOutcome out = loop.run_step(step);
      if (evaluator && Evaluator::due(step + 1, opts.steps, opts.eval_every)) {
        const EvalResult e = evaluator->evaluate();
        out.record.evaluated = true;
        out.record.eval_loss = e.loss, out.record.eval_tokens = e.tokens, out.record.eval_s = e.seconds;
      }
      result.steps.push_back(out.record);
      report.step(out.record);
      const bool saved = opts.save_every > 0 && ((step + 1) % opts.save_every == 0 || step + 1 == opts.steps);
      if (saved) save(step + 1);
      if (out.stop) {  // agreed by every rank in the step's reduction: all stop here
        if (opts.save_every > 0 && !saved) save(step + 1);
        result.stop_signal = stop_signal() ? stop_signal() : SIGTERM;  // a rank not signalled itself
        if (!run.quiet)
          std::fprintf(
              stderr, "strata: stopped by %s after step %lld of %lld; %s\n",
              result.stop_signal == SIGINT ? "SIGINT" : "SIGTERM", (long long)(step + 1), (long long)opts.steps,
              opts.save_every > 0 ? ("checkpoint " + newest_checkpoint(opts.out) + "; continue with --resume").c_str()
                                  : "no checkpoint (--save-every 0): a --resume starts fresh");
        break;
      }
    }
  } catch (const Error&) {
    // A failed step commits nothing: what survives is the last completed step's state.
    if (context.on_step_error) {
      std::vector<float> committed(size_t(run.trained_params()));
      try {
        run.engine->quiesce();
        run.engine->gather_full_params(committed);
        context.on_step_error(committed);
      } catch (const Error&) {
      }
    }
    throw;
  }
  const zero::ZeroEngine& engine = *run.engine;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  result.device_high_water = run.backend->budget().high_water();
  result.steady_state_allocations = loop.steady_state_allocations();
  result.gathers_on_demand = engine.stats().gathers_on_demand;
  result.gathers_prefetched = engine.stats().gathers_prefetched;
  result.live_param_high_water = engine.stats().live_param_high_water;
  result.host_bytes = engine.host_bytes();
  result.host_high_water = run.tiers ? run.tiers->budget(Tier::host).high_water() : 0;
  for (const io::NvmeFile* f : run.engine->nvme_files())
    if (f) result.nvme_bytes += f->capacity();
  result.speculative_commits = engine.stats().speculative_commits;
  result.speculative_redos = engine.stats().speculative_redos;
  result.speculative_discards = engine.stats().speculative_discards;
  if (context.keep_final_params) {
    result.final_params.resize(size_t(run.trained_params()));
    run.engine->gather_full_params(result.final_params);
  }
  report.done(result);
  return result;
}

}  // namespace strata
