#include "train/training_run.h"

#include <cstdio>
#include <filesystem>

#include "backend/device.h"
#include "backend/device_comm.h"
#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "host/convert.h"
#include "model/model_factory.h"
#include "model/transformer.h"
#include "train/option_registry.h"
#include "train/peft_import.h"
#include "train/resume.h"
#include "train/train_setup.h"
#include "train/weights_checksum.h"

namespace strata {

TrainingRun::TrainingRun(const TrainOptions& o, const TrainContext& c)
    : opts(o),
      comm(c.comm),
      model_path(resolve_model(o.model)),
      data_path(resolve_resource(o.data)),
      hf_dir(is_hf_model_dir(model_path)),
      spec(ModelSpec::load(model_path)),
      shape(nlohmann::json::parse(spec.shape_json())),
      rank(comm ? comm->rank() : 0),
      world(comm ? comm->size() : 1),
      lead(rank == 0),
      quiet(o.quiet || !lead),
      lock(o.out, comm) {  // this run owns --out until it ends (one lock for the job)
  if (!quiet && !lock.taken_over().empty())
    std::fprintf(stderr, "strata: note: took over --out %s from %s, which is no longer running\n", opts.out.c_str(),
                 lock.taken_over().c_str());
  // Resume: the newest complete checkpoint (none yet: a fresh start, so job scripts can always
  // pass --resume).
  ResumePoint resume = find_resume_point(opts, comm, shape, data_path, !quiet);
  checkpoint = std::move(resume.checkpoint);
  if (resume.complete) {
    finished = true;
    return;
  }
  start_step = checkpoint ? checkpoint->manifest().step : 0;
  // With --lora-rank a checkpoint holds the adapters alone: the frozen weights come from the
  // model directory again.
  const bool weights_from_dir = !checkpoint || opts.lora();
  if (weights_from_dir) check_model_weights(model_path, opts.init == "random");
  if (hf_dir && weights_from_dir && opts.init != "random") {
    imported = std::make_unique<HfWeights>(model_path, spec);
    if (!quiet && !imported->note().empty()) std::fprintf(stderr, "strata: note: %s\n", imported->note().c_str());
  }
  RunData d = make_run_data(opts, data_path, model_path, hf_dir, spec);
  data = std::move(d.train), eval_data = std::move(d.eval);
  data_line = std::move(d.train_line), eval_line = std::move(d.eval_line);
  open_device();
  open_engine_and_model(c.nvme_faults);
  schedule = opts.lr_schedule();
}

// This rank's share of its node, the device's and the host's threads (disjoint CPUs when
// bound), the backend --device names, and the tiers when anything is offloaded.
void TrainingRun::open_device() {
  const bool offload = opts.offload_optimizer != zero::OffloadTier::none ||
                       opts.offload_param != zero::OffloadTier::none ||
                       opts.offload_activations != zero::OffloadTier::none;
  share = node_share(comm, opts.host_mem, opts.nvme_path);
  const int cpus = share.cpus;
  host_threads = opts.host_threads > 0 ? opts.host_threads : offload ? std::max(1, cpus / 2) : 0;
  // With adapters the host side's work is small (the adapters' CPU Adam, and copies and drive
  // reads that mostly wait), so the device takes every CPU and the host's threads share them.
  device_threads = opts.device_threads > 0 ? opts.device_threads
                   : opts.threads > 0      ? opts.threads
                   : opts.lora()           ? cpus
                                           : std::max(1, cpus - host_threads);
  if (opts.bind_cpus && offload) {
    split = host::split_cpus(device_threads, host_threads, share.local_rank, share.local_size);
    host::bind_this_thread(split.device);  // before the first parallel region creates the team
  }
  std::string device_note;
  const std::string device = resolve_device(opts.device, &device_note);  // asks CUDA once
  if (!quiet && !device_note.empty()) std::fprintf(stderr, "strata: note: %s\n", device_note.c_str());
  backend = make_backend(device, {opts.device_mem, device_threads, share.local_rank});
  device_comm = make_device_comm(comm, *backend);
  if (offload)
    tiers = std::make_unique<tier::TierManager>(
        *backend, tier::TierOptions{share.host_mem, opts.pin_buffer_count, opts.pin_buffer_size, true, split.host});
  if (opts.pin_threads) pinned = host::pin_threads_to_physical_cores(opts.threads);
  isa = host::parse_adam_isa(opts.adam_isa) == host::AdamIsa::automatic ? host::adam_default_isa()
                                                                        : host::parse_adam_isa(opts.adam_isa);
  STRATA_CHECK(host::adam_isa_supported(isa), "--adam-isa " + opts.adam_isa + ": this CPU lacks it",
               "use --adam-isa auto");
}

// The ZeRO engine decides what the model allocates itself, and the optimizer runs inside
// it; the model's gradients always come from the engine (in the gradient dtype it keeps).
void TrainingRun::open_engine_and_model(io::IoFaults* nvme_faults) {
  nvme_faults_ = nvme_faults;
  engine_options = zero::ZeroOptions(strata::engine_options(opts, spec, share, comm, host_threads));
  engine = std::make_unique<zero::ZeroEngine>(*backend, device_comm ? device_comm.get() : comm, engine_options,
                                              AdamWConfig{float(opts.beta1),
                                                          float(opts.beta2),
                                                          float(opts.eps),
                                                          float(opts.weight_decay),
                                                          {isa, device_threads, 1 << 16},
                                                          opts.adam_bias_correction},
                                              tiers.get());
  if (engine->comm_stream() && !split.device.empty()) {  // communication is the device's work
    engine->comm_stream()->launch_host([this] { host::bind_this_thread(split.device); });
    engine->comm_stream()->synchronize();
  }
  if (opts.offload_activations == zero::OffloadTier::cpu)
    activations = std::make_unique<tier::HostActivationStore>(
        *tiers, spec.n_layer(),
        size_t(opts.micro_batch) * size_t(opts.seq_len) * size_t(spec.n_embd()) * dtype_size(opts.precision));
  if (opts.lora()) return open_lora_model();
  model = make_model(spec, *backend, opts.micro_batch, opts.seq_len, opts.precision,
                     ModelStorage{engine->model_owns_params(), false, engine->model_owns_master(opts.precision),
                                  opts.activation_checkpointing, activations.get()},
                     engine->hooks());
  // The weights: a checkpoint's master, a Hugging Face directory's, or the seed's.
  const FlatSource* init = checkpoint ? &checkpoint->source(0) : imported.get();
  if (model->owns_master() && init) {
    upload_flat(*init, model->master_flat(), *backend);
    model->sync_compute_params();
  } else if (model->owns_master()) {
    model->init_weights(opts.seed);
  }
  attach_engine(*model, model->param_specs(), model->owns_master() ? model->master_flat() : TensorView{},
                model->owns_params() ? model->compute_flat() : TensorView{}, init);
  if (checkpoint) engine->load_moments(checkpoint->source(1), checkpoint->source(2));
  if (engine->host_optimizer()) engine->host_optimizer()->set_faults(nvme_faults);
}

// The engine's parameter table: each tensor's flat offset, unit and weight decay.
std::vector<zero::ParamSpan> TrainingRun::param_spans(const std::vector<ParamSpec>& specs) {
  std::vector<zero::ParamSpan> out;
  int64_t offset = 0;
  for (const ParamSpec& s : specs) {
    out.push_back({s.name, s.unit, offset, s.shape.numel(), false, s.weight_decay});
    offset += s.shape.numel();
  }
  return out;
}

// A FlatSource into a device f32 array, a piece at a time through the host.
void TrainingRun::upload_flat(const FlatSource& src, TensorView dst, Backend& be) {
  std::vector<float> piece;
  const int64_t n = dst.numel(), most = int64_t(1) << 22;
  for (int64_t a = 0; a < n; a += most) {
    piece.resize(size_t(std::min(most, n - a)));
    src.read(a, int64_t(piece.size()), piece.data());
    be.upload(dst.as<float>() + a, piece.data(), piece.size() * 4);
  }
}

void TrainingRun::attach_engine(UnitModel& trained, const std::vector<ParamSpec>& specs, TensorView master,
                                TensorView compute, const FlatSource* init) {
  zero::ModelBuffers buffers;
  buffers.master = master.data ? master.as<float>() : nullptr;
  buffers.compute = compute.data;
  buffers.compute_dtype = opts.precision;
  buffers.params = param_spans(specs);
  engine->attach(trained, std::move(buffers), opts.seed, init);
}

// Low-rank adapters: the model's weights frozen in the compute dtype (a Hugging Face
// directory's, or the seed's): whole on every rank at stages 0-2; at stage 3 partitioned, on
// the device or where --offload-param says, and gathered like trained parameters. The engine
// trains the adapters (their optimizer states, gradients and, at stage 3, parameters
// partitioned as the stage says). A checkpoint holds the adapters alone.
void TrainingRun::open_lora_model() {
  const bool partitioned = opts.zero_stage == 3;
  ModelStorage storage{!partitioned, false, opts.precision == DType::f32 && !partitioned, opts.activation_checkpointing,
                       activations.get()};
  storage.frozen = true;
  model = make_model(spec, *backend, opts.micro_batch, opts.seq_len, opts.precision, storage, engine->hooks());
  auto* t = dynamic_cast<Transformer*>(model.get());
  STRATA_CHECK(t, "low-rank adapters on a model that is not a Transformer", "this is a bug");
  // Unit u's f32 weights, from the model directory or the seed, in unit order; their checksum
  // (XXH64 of the values) is the base a checkpoint's adapters were trained on.
  WeightsChecksum checksum;
  const auto fill = [&](int u, float* dst) {
    if (imported)
      imported->read(model->unit_begin(u), model->unit_count(u), dst);
    else
      model->init_unit(u, opts.seed, dst);
    checksum.add(dst, model->unit_count(u));
  };
  if (!partitioned) {  // each unit made (or read) on the host in f32, rounded once (16-bit), uploaded
    std::vector<float> unit;
    std::vector<uint16_t> narrow;
    const size_t esz = dtype_size(opts.precision);
    for (int u = 0; u < model->num_units(); ++u) {
      unit.resize(size_t(model->unit_count(u)));
      fill(u, unit.data());
      if (model->owns_master()) {  // f32: the master is what runs
        backend->upload(model->master_flat().as<float>() + model->unit_begin(u), unit.data(), unit.size() * 4);
        continue;
      }
      narrow.resize(unit.size());
      host::convert_from_f32(narrow.data(), opts.precision, unit.data(), unit.size());
      backend->upload(static_cast<char*>(model->compute_flat().data) + size_t(model->unit_begin(u)) * esz,
                      narrow.data(), narrow.size() * esz);
    }
  }
  const LoraConfig lora = opts.lora_config();
  t->attach_lora(lora_targets(spec, lora), lora,
                 {engine->model_owns_params(), engine->model_owns_master(opts.precision), false});
  LoraAdapters& ad = *t->lora();
  // Where the adapters start: the checkpoint's, a PEFT adapter's (--lora-adapter), or the seed's.
  std::unique_ptr<PeftAdapterWeights> adapter;
  if (!checkpoint && !opts.lora_adapter.empty())
    adapter = std::make_unique<PeftAdapterWeights>(opts.lora_adapter, spec, ad.targets(), lora.rank);
  const FlatSource* init = checkpoint ? &checkpoint->source(0) : adapter.get();
  UnitParams& p = ad.params();
  if (p.owns_master() && init) {
    upload_flat(*init, p.master_flat(), *backend);
    p.sync_compute();
  } else if (p.owns_master()) {
    p.init([&](int u, float* dst) { ad.init_unit(u, opts.seed, dst); });
  }
  attach_engine(ad, p.specs(), p.owns_master() ? p.master_flat() : TensorView{},
                p.owns_params() ? p.compute_flat() : TensorView{}, init);
  // At stage 3 attached after the adapters, so the NVMe parameter cache takes what the host
  // budget leaves.
  if (partitioned)
    engine->attach_frozen(*model, param_spans(model->param_specs()),
                          {opts.offload_param != zero::OffloadTier::none, opts.offload_param == zero::OffloadTier::nvme,
                           spec.head_is_embedding()},
                          fill);
  base_checksum = checksum.hex();
  if (checkpoint && checkpoint->manifest().run.contains("lora")) {
    const nlohmann::json& saved = checkpoint->manifest().run["lora"];
    STRATA_CHECK(!saved.contains("base_checksum") || saved["base_checksum"] == base_checksum,
                 "the frozen weights of " + model_path + " (checksum " + base_checksum +
                     ") are not those the checkpoint's adapters were trained on (" +
                     saved.value("base", std::string("?")) + ", checksum " + saved["base_checksum"].get<std::string>() +
                     ")",
                 "resume with the model the adapters were trained on, or start a fresh --out");
  }
  if (checkpoint) engine->load_moments(checkpoint->source(1), checkpoint->source(2));
  if (engine->host_optimizer()) engine->host_optimizer()->set_faults(nvme_faults_);
}

int64_t TrainingRun::trained_params() const {
  const auto* t = dynamic_cast<const Transformer*>(model.get());
  return t && t->lora() ? t->lora()->params().num_params() : model->num_params();
}

void TrainingRun::save_checkpoint(int64_t done_steps, int64_t applied, int64_t samples,
                                  const LossScaler::State& scaler) {
  CheckpointManifest m;
  m.step = done_steps, m.applied = applied, m.samples = samples;
  m.world = world, m.zero_stage = opts.zero_stage, m.num_params = trained_params(), m.seed = opts.seed;
  m.model = shape;
  m.loss_scaler = {{"scale", scaler.scale},
                   {"hysteresis_left", scaler.hysteresis_left},
                   {"iter", scaler.iter},
                   {"last_overflow", scaler.last_overflow}};
  m.run = {{"lr", opts.lr},
           {"warmup", opts.warmup},
           {"warmup_type", option_value(opts, "warmup-type")},
           {"adam_bias_correction", opts.adam_bias_correction},
           {"steps", opts.steps},
           {"micro_batch", opts.micro_batch},
           {"grad_accum", opts.grad_accum},
           {"seq_len", opts.seq_len},
           {"precision", std::string(dtype_name(opts.precision))},
           {"master_dtype", option_value(opts, "master-dtype")},
           {"optimizer_state_dtype", option_value(opts, "optimizer-state-dtype")},
           {"state_rounding", option_value(opts, "state-rounding")},
           {"data", data_path}};
  if (opts.lora()) {  // the adapters' shape: a resume must rebuild the same table
    const LoraConfig c = opts.lora_config();
    m.run["lora"] = {{"rank", c.rank},
                     {"alpha", c.alpha},
                     {"dropout", c.dropout},
                     {"targets", opts.lora_targets},
                     {"init", option_value(opts, "lora-init")},
                     {"base", std::filesystem::absolute(model_path).string()},
                     {"base_checksum", base_checksum}};
  }
  // The model directory a run started from: `strata export` copies its tokenizer files,
  // generation_config.json and special token ids into the exported model.
  if (std::filesystem::is_directory(model_path)) m.run["model_dir"] = std::filesystem::absolute(model_path).string();
  const std::vector<zero::ZeroEngine::StatePiece> pieces = engine->state_pieces(int64_t(1) << 22);
  static const char* kinds[3] = {"master", "m", "v"};
  // Each optimizer state is stored in its own dtype, so a bf16 state's checkpoint is half an f32
  // one's (a bf16 master's parameters without weight decay keep f32, as in the run). The
  // engine reads states widened to f32, which narrows back exactly.
  zero::StateFormat format;
  format.master = opts.master_dtype, format.moments = opts.optimizer_state_dtype;
  const auto dtype_of = [&](const zero::StatePiece& p) {
    return p.kind == 0 ? format.master_of(p.weight_decay) : format.moments;
  };
  std::vector<io::SafetensorsWriter::Entry> table;
  uint64_t file_bytes = 1024;  // the header's fixed part; each entry's below
  for (const auto& p : pieces) {
    table.push_back({std::string(kinds[p.kind]) + "." + std::to_string(p.flat_begin), dtype_of(p), {p.count}});
    file_bytes += uint64_t(p.count) * dtype_size(dtype_of(p)) + 128;
  }
  strata::save_checkpoint(opts.out, m, comm, opts.keep_checkpoints, file_bytes, [&](const std::string& path) {
    io::SafetensorsWriter w(path, table, {{"format", "strata-partition"}});
    std::vector<float> buf;
    for (const auto& p : pieces) {
      buf.resize(size_t(p.count));
      engine->read_state(p, buf.data());
      const DType dt = dtype_of(p);
      if (dt == DType::bf16)  // a bf16 state read back is a bf16 value: nothing is lost
        for (size_t i = 0; i < buf.size(); ++i)
          STRATA_CHECK(bf16_to_f32(f32_to_bf16(buf[i])) == buf[i] || buf[i] != buf[i],
                       std::string("checkpoint: ") + kinds[p.kind] + " element " +
                           std::to_string(p.flat_begin + int64_t(i)) + " is not a bf16 value in a run with bf16 " +
                           kinds[p.kind],
                       "this is a bug: report it with the run's options");
      w.write_f32(buf, dt);
    }
    const uint64_t h = w.finish();
    return SavedRankFile{h, w.bytes_total()};
  });
}

}  // namespace strata
