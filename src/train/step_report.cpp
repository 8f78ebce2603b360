#include "train/step_report.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <span>

#include "comm/communicator.h"

namespace strata {

nlohmann::json timeline_json(const StepTimeline& t) {
  return {{"wall_s", t.wall_s},
          {"busy_s",
           {{"compute", t.compute_s},
            {"comm", t.comm_s},
            {"d2h", t.d2h_s},
            {"h2d", t.h2d_s},
            {"cpu_adam", t.cpu_adam_s},
            {"host_sum", t.host_sum_s}}},
          {"bytes",
           {{"d2h", t.d2h_bytes},
            {"h2d", t.h2d_bytes},
            {"h2n", t.h2n_bytes},
            {"n2h", t.n2h_bytes},
            {"comm", t.comm_bytes},
            {"inter_node", t.inter_node_bytes}}},
          {"overlap", t.overlap()}};
}

std::string format_duration(double seconds) {
  char buf[32];
  const long t = long(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

std::string progress_line(int64_t step, int64_t steps, double loss, double lr, double norm, double tokens_per_s,
                          double eta_s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "step %6lld/%lld | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s | ETA %s",
                (long long)step, (long long)steps, loss, lr, norm, tokens_per_s, format_duration(eta_s).c_str());
  return buf;
}

std::string eval_text(double eval_loss) {
  char buf[64];
  std::snprintf(buf, sizeof buf, " | eval loss %.4f (ppl %.2f)", eval_loss, std::exp(eval_loss));
  return buf;
}

StepReporter::StepReporter(const TrainingRun& run, double tokens_per_step, TrainResult& result)
    : run_(run), tokens_per_step_(tokens_per_step), tty_(!run.quiet && isatty(STDERR_FILENO)) {
  const TrainOptions& opts = run.opts;
  const Model& model = *run.model;
  const zero::ZeroEngine& engine = *run.engine;
  if (run.lead) metrics_ = std::make_unique<MetricsLog>(opts.out, run.checkpoint ? run.start_step : -1);
  if (run.lead && (!opts.tensorboard.empty() || !opts.csv_dir.empty()))
    monitors_ = std::make_unique<RunMonitors>(opts.tensorboard, opts.csv_dir);
  if (!run.quiet) {
    std::fprintf(stderr,
                 "strata: %s, %.2fM params, %s on %s (threads pinned: %s, Adam: %s), "
                 "%d rank(s) on %d node(s) (%d CPUs each), ZeRO stage %d%s; %lld steps of %.0f tokens\n",
                 model.describe().c_str(), double(model.num_params()) / 1e6,
                 std::string(dtype_name(opts.precision)).c_str(), run.backend->name().c_str(), run.pinned.c_str(),
                 std::string(host::adam_isa_name(run.isa)).c_str(), run.world, run.share.nodes, run.share.cpus,
                 opts.zero_stage,
                 run.engine_options.hpz_partition_size > 1
                     ? (", hpZ groups of " + std::to_string(run.engine_options.hpz_partition_size)).c_str()
                     : "",
                 (long long)opts.steps, tokens_per_step);
    if (opts.lora()) {
      const LoraConfig c = opts.lora_config();
      const int64_t trained = run.trained_params();
      std::fprintf(stderr,
                   "strata: LoRA: rank %d, alpha %g, dropout %g on %s; %.4fM trainable parameters (%.3f%% of the "
                   "model), its own weights frozen\n",
                   c.rank, c.alpha, c.dropout,
                   opts.lora_targets.empty() ? "the family's default modules" : opts.lora_targets.c_str(),
                   double(trained) / 1e6, 100.0 * double(trained) / double(model.num_params()));
    }
    if (!run.data_line.empty()) std::fprintf(stderr, "strata: data: %s\n", run.data_line.c_str());
    if (!run.eval_line.empty()) std::fprintf(stderr, "strata: validation: %s\n", run.eval_line.c_str());
    if (const zero::StateFormat& f = run.engine_options.states; f.narrow())
      std::fprintf(stderr, "strata: optimizer states: master %s, m and v %s (%zu B per parameter), %s\n",
                   std::string(dtype_name(f.master)).c_str(), std::string(dtype_name(f.moments)).c_str(),
                   f.master_bytes() + 2 * f.moment_bytes(),
                   f.stochastic ? "rounded stochastically" : "rounded to nearest");
  }
  // Per-rank model-state bytes by kind, as allocated (rank 0 logs every rank's).
  const int world = run.world;
  const int64_t mine[5] = {int64_t(model.param_bytes() + engine.param_bytes()), int64_t(engine.grad_bytes()),
                           int64_t(engine.optimizer_state_bytes()), int64_t(engine.comm_buffer_bytes()),
                           int64_t(engine.host_bytes())};
  std::vector<int64_t> mem(size_t(5 * world));
  if (world > 1)
    run.comm->all_gather(std::span<const int64_t>(mine, 5), std::span<int64_t>(mem));
  else
    std::copy(mine, mine + 5, mem.begin());
  auto column = [&](int k) {
    nlohmann::json a = nlohmann::json::array();
    for (int r = 0; r < world; ++r) a.push_back(mem[size_t(5 * r + k)]);
    return a;
  };
  param_bytes_ = column(0), grad_bytes_ = column(1), optim_bytes_ = column(2), comm_buffers_ = column(3),
  host_bytes_ = column(4);
  comm_bytes_.assign(size_t(world), 0);
  comm_at_last_log_ = run.comm ? run.comm->counters().bytes_sent : 0;
  result.num_params = model.num_params();
  result.param_bytes = size_t(mine[0]), result.grad_bytes = size_t(mine[1]), result.optim_bytes = size_t(mine[2]);
}

void StepReporter::step(const StepRecord& r) {
  const TrainOptions& opts = run_.opts;
  const int64_t step = r.step - 1;
  smoothed_tps_ = step == 0 ? r.tokens_per_s : 0.9 * smoothed_tps_ + 0.1 * r.tokens_per_s;
  const bool log_now = r.step % opts.log_every == 0 || step == 0 || r.step == opts.steps || r.evaluated;
  ++steps_since_log_;
  if (log_now) {
    // Bytes each rank sent per step since the last log (collective: every rank logs alike).
    Communicator* comm = run_.comm;
    const int64_t sent =
        comm ? int64_t((comm->counters().bytes_sent - comm_at_last_log_) / uint64_t(steps_since_log_)) : 0;
    if (run_.world > 1)
      comm->all_gather(std::span<const int64_t>(&sent, 1), std::span<int64_t>(comm_bytes_));
    else
      comm_bytes_[0] = sent;
    comm_at_last_log_ = comm ? comm->counters().bytes_sent : 0, steps_since_log_ = 0;
    if (metrics_) {
      nlohmann::json line = {{"step", r.step},
                             {"loss", r.loss},
                             {"lr", r.lr},
                             {"grad_norm", r.grad_norm},
                             {"tokens_per_s", r.tokens_per_s},
                             {"useful_tokens_per_s", r.useful_tokens_per_s},
                             {"step_ms", r.step_ms},
                             {"device_bytes", run_.backend->budget().used()},
                             {"ranks", run_.world},
                             {"zero_stage", opts.zero_stage},
                             {"param_bytes", param_bytes_},
                             {"grad_bytes", grad_bytes_},
                             {"optim_bytes", optim_bytes_},
                             {"comm_buffer_bytes", comm_buffers_},
                             {"comm_bytes", comm_bytes_}};
      if (opts.precision == DType::f16)
        line["loss_scale"] = r.loss_scale, line["skipped"] = r.skipped;  // a skipped step's norm is null
      if (r.evaluated)
        line["eval_loss"] = r.eval_loss, line["eval_perplexity"] = std::exp(r.eval_loss),
        line["eval_tokens"] = r.eval_tokens, line["eval_s"] = r.eval_s;
      line["timeline"] = timeline_json(r.timeline);
      if (run_.tiers)
        line["host_bytes"] = host_bytes_, line["host_high_water"] = run_.tiers->budget(Tier::host).high_water();
      metrics_->write(line);
      if (monitors_) monitors_->write(line, r.step * opts.micro_batch * opts.grad_accum * run_.world);
    }
  }
  if (!run_.quiet && (tty_ || log_now)) {
    const double eta = double(opts.steps - r.step) * tokens_per_step_ / smoothed_tps_;
    std::fprintf(stderr, "%s%s%s%s", tty_ ? "\r" : "",
                 progress_line(r.step, opts.steps, r.loss, r.lr, r.grad_norm, smoothed_tps_, eta).c_str(),
                 r.evaluated ? eval_text(r.eval_loss).c_str() : "", tty_ && !log_now ? "" : "\n");
  }
}

void StepReporter::sync() {
  if (metrics_) metrics_->sync();  // the log holds every step the checkpoint covers
}

void StepReporter::done(const TrainResult& result) {
  if (run_.quiet || result.steps.empty()) return;
  std::string eval;
  for (auto it = result.steps.rbegin(); it != result.steps.rend() && eval.empty(); ++it)
    if (it->evaluated) eval = ";" + eval_text(it->eval_loss).substr(2);
  std::fprintf(stderr, "strata: done in %s; loss %.4f -> %.4f%s; metrics in %s\n",
               format_duration(result.seconds).c_str(), result.steps.front().loss, result.steps.back().loss,
               eval.c_str(), metrics_->path().c_str());
}

}  // namespace strata
