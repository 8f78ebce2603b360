#include "train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>

#include "backend/device.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "cpu/adam/adam.h"
#include "cpu/affinity.h"
#include "model/gpt2.h"
#include "model/hf_weights.h"
#include "model/model_factory.h"
#include "tier/activation_offload.h"
#include "tier/tier_manager.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/metrics_log.h"
#include "train/node_share.h"
#include "train/resume.h"
#include "train/run_lock.h"
#include "train/step_report.h"
#include "train/stop_signal.h"
#include "train/train_setup.h"
#include "zero/partition.h"
#include "zero/zero_engine.h"

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

TrainResult train(const TrainOptions& opts) {
  validate_options(opts);
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  const std::string model_path = resolve_model(opts.model), data_path = resolve_resource(opts.data);
  // A Hugging Face model directory brings its weights; a config file starts from the seed.
  const bool hf_dir = is_hf_model_dir(model_path);
  const ModelSpec spec = ModelSpec::load(model_path);
  const nlohmann::json shape = nlohmann::json::parse(spec.shape_json());
  const int rank = opts.comm ? opts.comm->rank() : 0, world = opts.comm ? opts.comm->size() : 1;
  const bool lead = rank == 0;  // rank 0 reports for everyone
  const bool quiet = opts.quiet || !lead;
  // This run owns --out until it returns (one lock for the job).
  const RunLock out_lock(opts.out, opts.comm);
  if (!quiet && !out_lock.taken_over().empty())
    std::fprintf(stderr, "strata: note: took over --out %s from %s, which is no longer running\n", opts.out.c_str(),
                 out_lock.taken_over().c_str());
  // Resume: the newest complete checkpoint (none yet: a fresh start, so job scripts can always
  // pass --resume).
  ResumePoint resume_point = find_resume_point(opts, shape, data_path, !quiet);
  if (resume_point.complete) {
    TrainResult done;
    done.already_complete = true;
    done.resumed_from = resume_point.checkpoint->manifest().step;
    return done;
  }
  const std::unique_ptr<CheckpointReader> ckpt = std::move(resume_point.checkpoint);
  std::unique_ptr<HfWeights> imported;
  if (hf_dir && !ckpt) imported = std::make_unique<HfWeights>(model_path, spec);
  const FlatSource* init = ckpt ? &ckpt->source(0) : imported.get();
  std::string data_line;
  const std::unique_ptr<SampleSource> data = make_training_data(opts, data_path, model_path, hf_dir, spec, &data_line);
  const SampleSource& loader = *data;

  const bool offload =
      opts.offload_optimizer != "none" || opts.offload_param != "none" || opts.offload_activations != "none";
  // This rank's share of its node: CPUs, host RAM and its NVMe directory.
  const NodeShare share = node_share(opts.comm, opts.host_mem, opts.nvme_path);
  const int local_rank = share.local_rank, local_size = share.local_size, cpus = share.cpus;
  // The device's and the host's threads (disjoint CPUs when bound).
  const int host_threads = opts.host_threads > 0 ? opts.host_threads : offload ? std::max(1, cpus / 2) : 0;
  const int device_threads = opts.device_threads > 0 ? opts.device_threads
                             : opts.threads > 0      ? opts.threads
                                                     : std::max(1, cpus - host_threads);
  cpu::CpuSplit split;
  if (opts.bind_cpus && offload) {
    split = cpu::split_cpus(device_threads, host_threads, local_rank, local_size);
    cpu::bind_this_thread(split.device);  // before the first parallel region creates the team
  }
  // The device: chosen by --device (the only concrete backend today is the CPU's).
  std::string device_note;
  const std::string device = resolve_device(opts.device, &device_note);  // asks CUDA once
  if (!quiet && !device_note.empty()) std::fprintf(stderr, "strata: note: %s\n", device_note.c_str());
  const std::unique_ptr<Backend> backend_ptr = make_backend(device, {opts.device_mem, device_threads});
  Backend& backend = *backend_ptr;
  std::unique_ptr<tier::TierManager> tiers;
  if (offload)
    tiers = std::make_unique<tier::TierManager>(
        backend, tier::TierOptions{share.host_mem, opts.pin_buffer_count, opts.pin_buffer_size, true, split.host});
  std::string pinned = "no";
  if (opts.pin_threads) pinned = cpu::pin_threads_to_physical_cores(opts.threads);
  const cpu::AdamIsa isa = cpu::parse_adam_isa(opts.adam_isa) == cpu::AdamIsa::automatic
                               ? cpu::adam_default_isa()
                               : cpu::parse_adam_isa(opts.adam_isa);
  STRATA_CHECK(cpu::adam_isa_supported(isa), "--adam-isa " + opts.adam_isa + ": this CPU lacks it",
               "use --adam-isa auto");
  // The ZeRO engine decides what the model allocates itself; the optimizer runs inside it.
  const zero::ZeroOptions zo = engine_options(opts, spec, share, opts.comm, host_threads);
  zero::ZeroEngine engine(
      backend, opts.comm, zo,
      {float(opts.beta1), float(opts.beta2), float(opts.eps), float(opts.weight_decay), {isa, device_threads, 1 << 16}},
      tiers.get());
  if (engine.comm_stream() && !split.device.empty()) {  // communication is the device's work
    engine.comm_stream()->launch_host([&split] { cpu::bind_this_thread(split.device); });
    engine.comm_stream()->synchronize();
  }
  // The model's gradients always come from the engine (in the gradient dtype it keeps).
  std::unique_ptr<tier::HostActivationStore> act_store;
  if (opts.offload_activations == "cpu")
    act_store = std::make_unique<tier::HostActivationStore>(
        *tiers, spec.n_layer(),
        size_t(opts.micro_batch) * size_t(opts.seq_len) * size_t(spec.n_embd()) * dtype_size(opts.precision));
  const std::unique_ptr<Model> model_ptr =
      make_model(spec, backend, opts.micro_batch, opts.seq_len, opts.precision,
                 ModelStorage{engine.model_owns_params(), false, engine.model_owns_master(opts.precision),
                              opts.activation_checkpointing, act_store.get()},
                 engine.hooks());
  Model& model = *model_ptr;
  if (model.owns_master() && init) {  // read on the host a piece at a time, uploaded
    std::vector<float> piece;
    const int64_t n = model.num_params(), most = int64_t(1) << 22;
    for (int64_t a = 0; a < n; a += most) {
      piece.resize(size_t(std::min(most, n - a)));
      init->read(a, int64_t(piece.size()), piece.data());
      backend.upload(model.master_flat().as<float>() + a, piece.data(), piece.size() * 4);
    }
    model.sync_compute_params();
  } else if (model.owns_master()) {
    model.init_weights(opts.seed);
  }
  zero::ModelBuffers buffers;
  buffers.master = model.owns_master() ? model.master_flat().as<float>() : nullptr;
  buffers.compute = model.owns_params() ? model.compute_flat().data : nullptr;
  buffers.compute_dtype = opts.precision;
  for (size_t i = 0; i < model.param_specs().size(); ++i) {
    buffers.params.push_back({model.param_specs()[i].name, model.param_specs()[i].unit, model.param_offset(int(i)),
                              model.param_specs()[i].shape.numel()});
    buffers.weight_decay.push_back(model.param_specs()[i].weight_decay);
  }
  engine.attach(model, std::move(buffers), opts.seed, init);
  if (ckpt) engine.load_moments(ckpt->source(1), ckpt->source(2));
  if (engine.host_optimizer()) engine.host_optimizer()->set_faults(opts.nvme_faults);
  const LrSchedule sched{opts.lr, opts.warmup, opts.steps, opts.min_lr_ratio,
                         opts.lr_decay == "linear"     ? LrSchedule::Decay::linear
                         : opts.lr_decay == "constant" ? LrSchedule::Decay::constant
                                                       : LrSchedule::Decay::cosine};
  std::unique_ptr<MetricsLog> metrics;
  const int64_t start_step = ckpt ? ckpt->manifest().step : 0;
  if (lead) metrics = std::make_unique<MetricsLog>(opts.out, ckpt ? start_step : -1);

  const int BT = opts.micro_batch * opts.seq_len;
  std::vector<int32_t> inputs(static_cast<size_t>(BT)), targets(static_cast<size_t>(BT));
  const int64_t samples_per_step = int64_t(opts.micro_batch) * opts.grad_accum * world;
  const double tokens_per_step = double(samples_per_step) * opts.seq_len;
  const bool tty = !quiet && isatty(STDERR_FILENO);
  if (!quiet)
    std::fprintf(stderr,
                 "strata: %s, %.2fM params, %s on %s (threads pinned: %s, Adam: %s), "
                 "%d rank(s) on %d node(s) (%d CPUs each), ZeRO stage %d%s; %lld steps of %.0f tokens\n",
                 model.describe().c_str(), double(model.num_params()) / 1e6,
                 std::string(dtype_name(opts.precision)).c_str(), backend.name().c_str(), pinned.c_str(),
                 std::string(cpu::adam_isa_name(isa)).c_str(), world, share.nodes, cpus, opts.zero_stage,
                 zo.hpz_partition_size > 1 ? (", hpZ groups of " + std::to_string(zo.hpz_partition_size)).c_str() : "",
                 (long long)opts.steps, tokens_per_step);
  if (!quiet && !data_line.empty()) std::fprintf(stderr, "strata: data: %s\n", data_line.c_str());

  // Per-rank model-state bytes by kind, as allocated (rank 0 logs every rank's).
  const int64_t mine[5] = {int64_t(model.param_bytes() + engine.param_bytes()), int64_t(engine.grad_bytes()),
                           int64_t(engine.optimizer_state_bytes()), int64_t(engine.comm_buffer_bytes()),
                           int64_t(engine.host_bytes())};
  std::vector<int64_t> mem(size_t(5 * world));
  if (world > 1)
    opts.comm->all_gather(std::span<const int64_t>(mine, 5), std::span<int64_t>(mem));
  else
    std::copy(mine, mine + 5, mem.begin());
  auto column = [&](int k) {
    nlohmann::json a = nlohmann::json::array();
    for (int r = 0; r < world; ++r) a.push_back(mem[size_t(5 * r + k)]);
    return a;
  };
  const nlohmann::json param_bytes = column(0), grad_bytes = column(1), optim_bytes = column(2),
                       comm_buffers = column(3), host_bytes = column(4);
  std::vector<int64_t> comm_bytes(static_cast<size_t>(world));
  uint64_t comm_at_last_log = opts.comm ? opts.comm->counters().bytes_sent : 0;
  int64_t steps_since_log = 0;

  TrainResult result;
  result.num_params = model.num_params();
  result.param_bytes = size_t(mine[0]), result.grad_bytes = size_t(mine[1]), result.optim_bytes = size_t(mine[2]);
  result.steps.reserve(size_t(opts.steps));  // no host allocation inside the step either
  size_t allocations_after_first = 0;
  double smoothed_tps = 0;
  const bool fp16 = opts.precision == DType::f16;
  LossScaler scaler({fp16, opts.loss_scale == 0, opts.loss_scale, opts.initial_scale_power, opts.loss_scale_window,
                     opts.hysteresis, opts.min_loss_scale});
  int64_t applied = 0;       // optimizer updates so far (overflowed fp16 steps apply none)
  int64_t base_samples = 0;  // global samples consumed before this run's first step
  if (ckpt) {
    const CheckpointManifest& m = ckpt->manifest();
    applied = m.applied, base_samples = m.samples, result.resumed_from = m.step;
    const nlohmann::json& ls = m.loss_scaler;
    if (fp16 && ls.contains("scale"))
      scaler.restore({ls.value("scale", 1.0), ls.value("hysteresis_left", 1), ls.value("iter", int64_t(0)),
                      ls.value("last_overflow", int64_t(-1))});
  }
  auto save = [&](int64_t done_steps) {
    CheckpointManifest m;
    m.step = done_steps, m.applied = applied;
    m.samples = base_samples + (done_steps - start_step) * samples_per_step;
    m.world = world, m.zero_stage = opts.zero_stage, m.num_params = model.num_params(), m.seed = opts.seed;
    m.model = shape;
    const LossScaler::State st = scaler.state();
    m.loss_scaler = {{"scale", st.scale},
                     {"hysteresis_left", st.hysteresis_left},
                     {"iter", st.iter},
                     {"last_overflow", st.last_overflow}};
    m.run = {{"lr", opts.lr},
             {"warmup", opts.warmup},
             {"steps", opts.steps},
             {"micro_batch", opts.micro_batch},
             {"grad_accum", opts.grad_accum},
             {"seq_len", opts.seq_len},
             {"precision", std::string(dtype_name(opts.precision))},
             {"data", data_path}};
    if (metrics) metrics->sync();  // the log holds every step the checkpoint covers
    const std::vector<zero::ZeroEngine::StatePiece> pieces = engine.state_pieces(int64_t(1) << 22);
    static const char* kinds[3] = {"master", "m", "v"};
    std::vector<io::SafetensorsWriter::Entry> table;
    uint64_t file_bytes = 1024;  // the header's fixed part; each entry's below
    for (const auto& p : pieces) {
      table.push_back({std::string(kinds[p.kind]) + "." + std::to_string(p.flat_begin), DType::f32, {p.count}});
      file_bytes += uint64_t(p.count) * 4 + 128;
    }
    save_checkpoint(opts.out, m, opts.comm, opts.keep_checkpoints, file_bytes, [&](const std::string& path) {
      io::SafetensorsWriter w(path, table, {{"format", "strata-partition"}});
      std::vector<float> buf;
      for (const auto& p : pieces) {
        buf.resize(size_t(p.count));
        engine.read_state(p, buf.data());
        w.write(buf.data(), buf.size() * 4);
      }
      const uint64_t h = w.finish();
      return SavedRankFile{h, w.bytes_total()};
    });
  };
  auto sample = [&] {  // the engines' cumulative counters, differenced per step
    StepTimeline t;
    t.compute_s = engine.stats().blocked_s + (act_store ? act_store->blocked_seconds() : 0);  // blocked so far
    t.comm_s = engine.comm_stream() ? engine.comm_stream()->busy_seconds() : 0;
    if (tiers) {
      t.d2h_s = tiers->d2h().busy_seconds(), t.h2d_s = tiers->h2d().busy_seconds();
      t.cpu_adam_s = tiers->host().busy_seconds(), t.host_sum_s = tiers->host_sum().busy_seconds();
      t.d2h_bytes = tiers->bytes(tier::Edge::d2h), t.h2d_bytes = tiers->bytes(tier::Edge::h2d);
    }
    if (auto* h = engine.host_optimizer(); h && h->nvme_file())
      t.h2n_bytes = h->nvme_file()->bytes_written.load(), t.n2h_bytes = h->nvme_file()->bytes_read.load();
    t.comm_bytes = opts.comm ? opts.comm->counters().bytes_sent : 0;
    t.inter_node_bytes = opts.comm ? opts.comm->counters().inter_node_bytes : 0;
    return t;
  };
  try {
    for (int64_t step = start_step; step < opts.steps; ++step) {
      if (opts.on_step_begin) opts.on_step_begin(step);
      const auto t0 = clock::now();
      const StepTimeline before = sample();
      const double scale = scaler.scale();
      // What a speculative offloaded update assumes: this step's lr, t, and no clipping.
      engine.begin_step({float(sched.at(applied)), float(1.0 / scale), applied + 1});
      // The step's unmasked targets over the global batch, counted alike on every rank.
      const int64_t step_targets =
          loader.unmasked_targets(base_samples + (step - start_step) * samples_per_step, int(samples_per_step));
      for (int micro = 0; micro < opts.grad_accum; ++micro) {
        engine.begin_micro(micro, opts.grad_accum);
        // This rank's slice of the step's global batch (the same samples for any world size).
        loader.fill(
            base_samples + zero::first_sample(step - start_step, rank, world, opts.micro_batch, opts.grad_accum, micro),
            opts.micro_batch, inputs, targets);
        model.forward(inputs);
        // Each micro-batch's mean loss weighs its share of the step's unmasked targets (for
        // token streams 1/(accum·world)), so the ranks' sum is the global batch's token mean.
        int64_t unmasked = 0;
        for (int32_t t : targets) unmasked += t >= 0;
        const double share = step_targets ? double(unmasked) / double(step_targets) : 0.0;
        model.backward(targets, float(scale * share), engine.loss_sum(), share);  // read back once, below
      }
      // Gradients combined across ranks; loss, norm and overflow agreed in one reduction.
      // ... and a stop asked for on any rank (SIGINT/SIGTERM), so every rank stops after this step.
      const zero::ReducedStep red = engine.reduce_gradients(0, stop_signal() != 0);
      const double loss = red.loss;
      const double lr = sched.at(applied);
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
        engine.step(float(lr), float(clip / scale), ++applied);
      }
      scaler.update(red.overflow && fp16);
      const double step_s = std::chrono::duration<double>(clock::now() - t0).count();
      if (step == start_step) allocations_after_first = backend.budget().allocation_count();
      const double tps = tokens_per_step / step_s;
      smoothed_tps = step == 0 ? tps : 0.9 * smoothed_tps + 0.1 * tps;
      StepTimeline tl = sample();
      tl.wall_s = step_s;
      tl.compute_s = std::max(0.0, step_s - (tl.compute_s - before.compute_s));
      tl.comm_s -= before.comm_s, tl.d2h_s -= before.d2h_s, tl.h2d_s -= before.h2d_s;
      tl.cpu_adam_s -= before.cpu_adam_s, tl.host_sum_s -= before.host_sum_s;
      tl.d2h_bytes -= before.d2h_bytes, tl.h2d_bytes -= before.h2d_bytes;
      tl.h2n_bytes -= before.h2n_bytes, tl.n2h_bytes -= before.n2h_bytes;
      tl.comm_bytes -= before.comm_bytes, tl.inter_node_bytes -= before.inter_node_bytes;
      result.steps.push_back({step + 1, loss, lr, norm, tps, step_s * 1e3, scale, skipped, tl});
      const bool log_now = (step + 1) % opts.log_every == 0 || step == 0 || step + 1 == opts.steps;
      ++steps_since_log;
      if (log_now) {
        // Bytes each rank sent per step since the last log (collective: every rank logs alike).
        const int64_t sent =
            opts.comm ? int64_t((opts.comm->counters().bytes_sent - comm_at_last_log) / uint64_t(steps_since_log)) : 0;
        if (world > 1)
          opts.comm->all_gather(std::span<const int64_t>(&sent, 1), std::span<int64_t>(comm_bytes));
        else
          comm_bytes[0] = sent;
        comm_at_last_log = opts.comm ? opts.comm->counters().bytes_sent : 0, steps_since_log = 0;
        if (metrics) {
          nlohmann::json line = {{"step", step + 1},
                                 {"loss", loss},
                                 {"lr", lr},
                                 {"grad_norm", norm},
                                 {"tokens_per_s", tps},
                                 {"step_ms", step_s * 1e3},
                                 {"device_bytes", backend.budget().used()},
                                 {"ranks", world},
                                 {"zero_stage", opts.zero_stage},
                                 {"param_bytes", param_bytes},
                                 {"grad_bytes", grad_bytes},
                                 {"optim_bytes", optim_bytes},
                                 {"comm_buffer_bytes", comm_buffers},
                                 {"comm_bytes", comm_bytes}};
          if (fp16) line["loss_scale"] = scale, line["skipped"] = skipped;  // a skipped step's norm is null
          const StepTimeline& t = result.steps.back().timeline;
          line["timeline"] = timeline_json(t);
          if (tiers) line["host_bytes"] = host_bytes, line["host_high_water"] = tiers->budget(Tier::host).high_water();
          metrics->write(line);
        }
      }
      if (!quiet && (tty || log_now)) {
        const double eta = double(opts.steps - step - 1) * tokens_per_step / smoothed_tps;
        std::fprintf(stderr, "%s%s%s", tty ? "\r" : "",
                     progress_line(step + 1, opts.steps, loss, lr, norm, smoothed_tps, eta).c_str(),
                     tty && !log_now ? "" : "\n");
      }
      const bool saved = opts.save_every > 0 && ((step + 1) % opts.save_every == 0 || step + 1 == opts.steps);
      if (saved) save(step + 1);
      if (red.stop) {  // agreed by every rank in the step's reduction: all stop here
        if (opts.save_every > 0 && !saved) save(step + 1);
        result.stop_signal = stop_signal() ? stop_signal() : SIGTERM;  // a rank not signalled itself
        if (!quiet)
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
    if (opts.on_step_error) {
      std::vector<float> committed(size_t(model.num_params()));
      try {
        engine.quiesce();
        engine.gather_full_params(committed);
        opts.on_step_error(committed);
      } catch (const Error&) {
      }
    }
    throw;
  }
  result.seconds = std::chrono::duration<double>(clock::now() - t_start).count();
  result.device_high_water = backend.budget().high_water();
  result.steady_state_allocations = backend.budget().allocation_count() - allocations_after_first;
  result.gathers_on_demand = engine.stats().gathers_on_demand;
  result.gathers_prefetched = engine.stats().gathers_prefetched;
  result.live_param_high_water = engine.stats().live_param_high_water;
  result.host_bytes = engine.host_bytes();
  result.host_high_water = tiers ? tiers->budget(Tier::host).high_water() : 0;
  if (auto* h = engine.host_optimizer(); h && h->nvme_file()) result.nvme_bytes = h->nvme_file()->capacity();
  result.speculative_commits = engine.stats().speculative_commits;
  result.speculative_redos = engine.stats().speculative_redos;
  result.speculative_discards = engine.stats().speculative_discards;
  if (opts.keep_final_params) {
    result.final_params.resize(size_t(model.num_params()));
    engine.gather_full_params(result.final_params);
  }
  if (!quiet && !result.steps.empty())
    std::fprintf(stderr, "strata: done in %s; loss %.4f -> %.4f; metrics in %s\n",
                 format_duration(result.seconds).c_str(), result.steps.front().loss, result.steps.back().loss,
                 metrics->path().c_str());
  return result;
}

}  // namespace strata
