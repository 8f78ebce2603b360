#include "train/option_registry.h"

#include <cstdio>
#include <limits>

#include "core/error.h"
#include "core/parse.h"

namespace strata {

namespace {

using O = TrainOptions;

TrainOption option(std::string name, std::string help, std::string default_value, bool flag, std::string deepspeed) {
  TrainOption d;
  d.name = std::move(name), d.help = std::move(help), d.default_value = std::move(default_value);
  d.flag = flag, d.deepspeed = std::move(deepspeed);
  return d;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string bytes_text(size_t v) {
  for (auto [unit, name] : {std::pair{size_t(1) << 30, "GiB"}, {size_t(1) << 20, "MiB"}, {size_t(1) << 10, "KiB"}})
    if (v >= unit && v % unit == 0) return std::to_string(v / unit) + name;
  return std::to_string(v);
}

void need(bool ok, const std::string& option, const std::string& value, const std::string& rule) {
  STRATA_CHECK(ok, "--" + option + ": " + value + " is out of range: " + rule, "");
}

std::string list_of(const std::vector<std::string>& choices) {
  std::string list;
  for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
  return list;
}

// An integer field (int or int64_t) within [lo, hi]; `count` also takes 5e8-style counts.
// A field of one of TrainOptions' groups (train_options.h).
template <typename T, typename G>
TrainOption integer(const char* name, T G::*field, const char* help, int64_t lo, int64_t hi = INT64_MAX,
                    bool count = false, const char* ds = "") {
  const std::string opt = std::string("--") + name;
  TrainOption d = option(name, help, std::to_string(O{}.*field), false, ds);
  d.set = [=](O& o, const std::string& v) {
    int64_t x = count ? parse_count(v, opt) : parse_int(v, opt);
    if constexpr (sizeof(T) < sizeof(int64_t))
      STRATA_CHECK(x <= std::numeric_limits<T>::max() && x >= std::numeric_limits<T>::min(),
                   opt + ": " + v + " is out of range (at most " + std::to_string(std::numeric_limits<T>::max()) + ")",
                   "give a smaller number");
    o.*field = T(x);
  };
  d.get = [=](const O& o) { return std::to_string(o.*field); };
  d.check = [=](const O& o) {
    const int64_t x = int64_t(o.*field);
    if (hi == INT64_MAX)
      need(x >= lo, name, std::to_string(x), "must be at least " + std::to_string(lo));
    else
      need(x >= lo && x <= hi, name, std::to_string(x),
           "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  return d;
}

template <typename T, typename G>
TrainOption count(const char* name, T G::*field, const char* help, int64_t lo, const char* ds = "") {
  return integer(name, field, help, lo, INT64_MAX, true, ds);
}

// A real field; ok(value) says whether it is in range, `rule` says what the range is.
TrainOption real(const char* name, double O::*field, const char* help, bool (*ok)(double), const char* rule,
                 const char* ds = "") {
  const std::string opt = std::string("--") + name;
  TrainOption d = option(name, help, num(O{}.*field), false, ds);
  d.set = [=](O& o, const std::string& v) { o.*field = parse_double(v, opt); };
  d.get = [=](const O& o) { return num(o.*field); };
  d.check = [=](const O& o) { need(ok(o.*field), name, num(o.*field), rule); };
  return d;
}

// A size in bytes ("16MiB"), at least lo and a multiple of `multiple`.
TrainOption bytes(const char* name, size_t O::*field, const char* help, size_t lo, size_t multiple = 1,
                  const char* ds = "") {
  const std::string opt = std::string("--") + name;
  TrainOption d = option(name, help, bytes_text(O{}.*field), false, ds);
  d.set = [=](O& o, const std::string& v) { o.*field = parse_bytes(v, opt); };
  d.get = [=](const O& o) { return bytes_text(o.*field); };
  d.check = [=](const O& o) {
    const size_t x = o.*field;
    need(x >= lo && x % multiple == 0, name, std::to_string(x),
         multiple > 1 ? "must be a positive multiple of " + std::to_string(multiple) + " bytes (direct I/O)"
         : lo > 1     ? "must be at least " + std::to_string(lo)
                      : "must be positive");
  };
  return d;
}

// A string field; with choices, one of them.
TrainOption text(const char* name, std::string O::*field, const char* help, std::vector<std::string> choices = {},
                 const char* ds = "") {
  TrainOption d = option(name, help, O{}.*field, false, ds);
  d.set = [=](O& o, const std::string& v) { o.*field = v; };
  d.get = [=](const O& o) { return o.*field; };
  d.check = [=](const O& o) {
    if (choices.empty()) return;
    for (const std::string& c : choices)
      if (o.*field == c) return;
    throw_error("--" + std::string(name) + ": '" + o.*field + "' is not one of " + list_of(choices),
                "use one of " + list_of(choices));
  };
  return d;
}

// An enumerated field: parsed once into its enum, printed back by name. `names` lists every
// value in --help's order.
template <typename E, typename G>
TrainOption choice(const char* name, E G::*field, const char* help, std::vector<std::pair<std::string, E>> names,
                   const char* ds = "") {
  const auto name_of = [names](E e) {
    for (const auto& [n, v] : names)
      if (v == e) return n;
    return std::string("?");
  };
  TrainOption d = option(name, help, name_of(O{}.*field), false, ds);
  d.set = [=](O& o, const std::string& s) {
    std::vector<std::string> choices;
    for (const auto& [n, v] : names) {
      if (n == s) {
        o.*field = v;
        return;
      }
      choices.push_back(n);
    }
    throw_error("--" + std::string(name) + ": '" + s + "' is not one of " + list_of(choices),
                "use one of " + list_of(choices));
  };
  d.get = [=](const O& o) { return name_of(o.*field); };
  d.check = [](const O&) {};  // every value of the enum is valid
  return d;
}

// Where offloaded states live: none (on the device), host RAM or NVMe.
std::vector<std::pair<std::string, zero::OffloadTier>> offload_tiers() {
  return {{"none", zero::OffloadTier::none}, {"cpu", zero::OffloadTier::cpu}, {"nvme", zero::OffloadTier::nvme}};
}

// The state dtypes: f32 or bf16.
std::vector<std::pair<std::string, DType>> state_dtypes() { return {{"f32", DType::f32}, {"bf16", DType::bf16}}; }

// A switch: present = true.
TrainOption flag(const char* name, bool O::*field, const char* help, const char* ds = "") {
  TrainOption d = option(name, help, "", true, ds);
  d.set = [=](O& o, const std::string& v) { o.*field = v == "true"; };
  d.get = [=](const O& o) { return std::string(o.*field ? "true" : "false"); };
  d.check = [](const O&) {};
  return d;
}

// true | false, typed; `dflt` is the CLI's default where it differs from TrainOptions'.
TrainOption boolean(const char* name, bool O::*field, const char* help, const char* dflt = nullptr,
                    const char* ds = "") {
  TrainOption d = option(name, help, dflt ? dflt : (O{}.*field ? "true" : "false"), false, ds);
  d.set = [=](O& o, const std::string& v) {
    STRATA_CHECK(v == "true" || v == "false", "--" + std::string(name) + ": '" + v + "' is not true or false",
                 "use true or false");
    o.*field = v == "true";
  };
  d.get = [=](const O& o) { return std::string(o.*field ? "true" : "false"); };
  d.check = [](const O&) {};
  return d;
}

bool positive(double v) { return v > 0; }
bool not_negative(double v) { return v >= 0; }
bool fraction(double v) { return v >= 0 && v <= 1; }
bool beta(double v) { return v >= 0 && v < 1; }
bool held_out(double v) { return v >= 0 && v < 1; }

std::vector<TrainOption> make_options() {
  std::vector<TrainOption> v;
  v.push_back(text("model", &O::model,
                   "model config (JSON: GPT-2 or Llama, Strata's or Hugging Face's config.json) or a Hugging Face "
                   "GPT-2/Llama directory (config.json + safetensors weights)"));
  v.push_back(
      text("data", &O::data,
           "training data: token file (.bin/.u16 uint16, .u32 uint32, llm.c .bin), text (.txt, byte-level), "
           "or fine-tuning JSONL (.jsonl: {\"prompt\", \"completion\"} per line, loss on the completion only)"));
  v.push_back(
      text("data-format", &O::data_format, "auto | u16 | u32 | text | jsonl", {"auto", "u16", "u32", "text", "jsonl"}));
  v.push_back(text("tokenizer", &O::tokenizer,
                   "for JSONL text: a sentencepiece tokenizer.model, or 'bytes' (default: tokenizer.model in the "
                   "--model directory)"));
  v.push_back(text("init", &O::init,
                   "auto (a model directory's safetensors weights, required there; else random) | random",
                   {"auto", "random"}));
  v.push_back(integer("steps", &O::steps, "optimizer steps", 1));
  v.push_back(integer("micro-batch", &O::micro_batch, "sequences per micro-batch", 1, INT64_MAX, false,
                      "train_micro_batch_size_per_gpu"));
  v.push_back(integer("grad-accum", &O::grad_accum, "micro-batches accumulated per step", 1, INT64_MAX, false,
                      "gradient_accumulation_steps"));
  v.push_back(integer("seq-len", &O::seq_len, "tokens per sequence", 1));
  v.push_back(boolean("pack", &O::pack,
                      "JSONL: pack several records into each --seq-len row, each attending only to itself with "
                      "positions from 0 (false: one record per row, padded)"));
  v.push_back(text("eval-data", &O::eval_data,
                   "validation data in any --data format (prepared JSONL too), evaluated forward only"));
  v.push_back(real("eval-fraction", &O::eval_fraction,
                   "hold out this fraction of --data for validation (JSONL: records; token files: the last tokens); "
                   "never trained on",
                   held_out, "must be in [0, 1)"));
  v.push_back(integer("eval-every", &O::eval_every, "steps between evaluations (0: only after the last step)", 0));
  v.push_back(
      integer("eval-batches", &O::eval_batches, "global batches per evaluation (0: the whole validation set)", 0));
  v.push_back(real("lr", &O::lr, "peak learning rate", positive, "must be positive", "optimizer.params.lr"));
  v.push_back(
      integer("warmup", &O::warmup, "linear warmup steps", 0, INT64_MAX, false, "scheduler.params.warmup_num_steps"));
  v.push_back(choice("warmup-type", &O::warmup_type,
                     "linear | log (DeepSpeed's default: lr·ln(max(step,1))/ln(warmup), step for step as DeepSpeed)",
                     {{"linear", LrSchedule::Warmup::linear}, {"log", LrSchedule::Warmup::log}},
                     "scheduler.params.warmup_type"));
  v.push_back(choice("lr-decay", &O::lr_decay,
                     "after warmup: cosine | linear | constant (down to --min-lr-ratio at the last step)",
                     {{"cosine", LrSchedule::Decay::cosine},
                      {"linear", LrSchedule::Decay::linear},
                      {"constant", LrSchedule::Decay::constant}}));
  v.push_back(real("min-lr-ratio", &O::min_lr_ratio, "cosine decay floor as a fraction of --lr", fraction,
                   "must be in [0, 1]", "scheduler.params.cos_min_ratio"));
  v.push_back(real("weight-decay", &O::weight_decay, "AdamW decoupled weight decay (matmul weights and embeddings)",
                   not_negative, "must not be negative", "optimizer.params.weight_decay"));
  v.push_back(real("beta1", &O::beta1, "Adam beta1", beta, "must be in [0, 1)", "optimizer.params.betas"));
  v.push_back(real("beta2", &O::beta2, "Adam beta2", beta, "must be in [0, 1)", "optimizer.params.betas"));
  v.push_back(real("eps", &O::eps, "Adam epsilon", positive, "must be positive", "optimizer.params.eps"));
  v.push_back(real("grad-clip", &O::grad_clip, "global gradient-norm clip (0 = off)", not_negative,
                   "must not be negative (0 disables clipping)", "gradient_clipping"));
  {
    TrainOption d = option("precision",
                           "f32 | bf16 | f16 (16-bit compute and gradients, f32 master weights; f16 with loss scaling)",
                           "f32", false, "bf16.enabled, fp16.enabled");
    d.set = [](O& o, const std::string& s) {
      STRATA_CHECK(s == "f32" || s == "bf16" || s == "f16", "--precision: '" + s + "' is not f32, bf16 or f16",
                   "use f32, bf16 or f16");
      o.precision = parse_dtype(s);
    };
    d.get = [](const O& o) { return std::string(dtype_name(o.precision)); };
    d.check = [](const O& o) {
      STRATA_CHECK(o.precision == DType::f32 || o.precision == DType::bf16 || o.precision == DType::f16,
                   "--precision " + std::string(dtype_name(o.precision)) + " is not f32, bf16 or f16",
                   "use f32, bf16 or f16");
    };
    v.push_back(d);
  }
  {
    TrainOption d = option("seed", "random seed (weights and data order)", std::to_string(O{}.seed), false, "");
    d.set = [](O& o, const std::string& s) { o.seed = uint64_t(parse_int(s, "--seed", 0)); };
    d.get = [](const O& o) { return std::to_string(o.seed); };
    d.check = [](const O&) {};
    v.push_back(d);
  }
  v.push_back(text("out", &O::out, "output directory (metrics.jsonl)"));
  v.push_back(text("tensorboard", &O::tensorboard,
                   "write TensorBoard event files of each logged step into DIR (as DeepSpeed's tensorboard block)"));
  v.push_back(text("csv-dir", &O::csv_dir,
                   "write each logged step's scalars into DIR, one CSV file per tag (as DeepSpeed's csv_monitor)"));
  v.push_back(
      integer("log-every", &O::log_every, "steps between logged metrics", 1, INT64_MAX, false, "steps_per_print"));
  v.push_back(integer("threads", &O::threads, "CPU threads for ops (0 = all)", 0));
  v.push_back(flag("pin-threads", &O::pin_threads, "pin the OpenMP threads one per physical core"));
  v.push_back(text("adam-isa", &O::adam_isa, "CPU Adam kernel: auto | scalar | avx2 | avx512",
                   {"auto", "scalar", "avx2", "avx512"}));
  v.push_back(choice("device", &O::device,
                     "auto | cpu | cuda: the backend (auto: cuda when this build has CUDA and a GPU is visible, else "
                     "the CPU)",
                     {{device_choice_name(DeviceChoice::automatic), DeviceChoice::automatic},
                      {device_choice_name(DeviceChoice::cpu), DeviceChoice::cpu},
                      {device_choice_name(DeviceChoice::cuda), DeviceChoice::cuda}}));
  v.push_back(bytes("device-mem", &O::device_mem, "device memory budget, e.g. 8GiB", 1));
  v.push_back(integer("lora-rank", &O::lora_rank,
                      "low-rank adapters of this rank on the --lora-targets, the model's own weights frozen (0: train "
                      "every weight)",
                      0, 65536, false, "lora.r"));
  v.push_back(real("lora-alpha", &O::lora_alpha, "the adapters' scale is alpha / rank (PEFT's lora_alpha)", positive,
                   "must be positive", "lora.lora_alpha"));
  v.push_back(real("lora-dropout", &O::lora_dropout, "dropout on the adapters' input (PEFT's lora_dropout)", held_out,
                   "must be in [0, 1)", "lora.lora_dropout"));
  v.push_back(text("lora-targets", &O::lora_targets,
                   "comma-separated module names the adapters go on (q_proj, ..., down_proj; GPT-2's c_attn, c_proj, "
                   "c_fc), or all-linear (default: the family's PEFT default, q_proj,v_proj for Llama)",
                   {}, "lora.target_modules"));
  v.push_back(choice("lora-init", &O::lora_init,
                     "how A starts (B starts at zero): default (PEFT's Kaiming-uniform) | gaussian (N(0, 1/r))",
                     {{"default", LoraInit::kaiming}, {"gaussian", LoraInit::gaussian}}, "lora.init_lora_weights"));
  v.push_back(text("lora-adapter", &O::lora_adapter,
                   "start the adapters from this PEFT adapter directory (adapter_config.json and "
                   "adapter_model.safetensors): its r, lora_alpha, lora_dropout and target_modules set the --lora-* "
                   "options"));
  v.push_back(integer("zero-stage", &O::zero_stage,
                      "ZeRO stage: 0 replicated, 1 +optimizer states, 2 +gradients, 3 +parameters partitioned (under "
                      "mpirun)",
                      0, 3, false, "zero_optimization.stage"));
  v.push_back(count("sub-group-size", &O::sub_group_size, "parameters per partitioned sub-group", 1,
                    "zero_optimization.sub_group_size"));
  v.push_back(count("reduce-bucket-size", &O::reduce_bucket_size,
                    "elements (all ranks) per gradient reduce-scatter/all-reduce bucket", 1,
                    "zero_optimization.reduce_bucket_size"));
  v.push_back(count("allgather-bucket-size", &O::allgather_bucket_size,
                    "elements (all ranks) per parameter all-gather bucket (stages 1-2)", 1,
                    "zero_optimization.allgather_bucket_size"));
  v.push_back(boolean("adam-bias-correction", &O::adam_bias_correction, "AdamW divides m and v by 1-β^t (true | false)",
                      nullptr, "optimizer.params.bias_correction"));
  v.push_back(boolean("overlap-comm", &O::overlap_comm,
                      "run communication on its own stream, overlapped with backward (true | false)", nullptr,
                      "zero_optimization.overlap_comm"));
  v.push_back(count("prefetch-depth", &O::prefetch_depth, "stage 3: units gathered ahead of use", 0));
  v.push_back(count("prefetch-bucket-size", &O::prefetch_bucket_size,
                    "stage 3: elements gathered ahead of use (> 0 overrides --prefetch-depth)", 0,
                    "zero_optimization.stage3_prefetch_bucket_size"));
  v.push_back(count("param-persistence-threshold", &O::param_persistence_threshold,
                    "stage 3: parameters with fewer elements stay whole on every rank", 0,
                    "zero_optimization.stage3_param_persistence_threshold"));
  v.push_back(count("max-live-params", &O::max_live_params,
                    "stage 3: gathered parameter elements at once (0 = from --prefetch-depth)", 0,
                    "zero_optimization.stage3_max_live_parameters"));
  {
    TrainOption d =
        option("hpz-partition-size",
               "stage 3: ranks per secondary parameter partition, kept after the forward gather so backward "
               "gathers within it (ZeRO++ hpZ): 1 = none, node = the ranks per node",
               "1", false, "zero_optimization.zero_hpz_partition_size");
    d.set = [](O& o, const std::string& s) {
      o.hpz_partition_size =
          s == "node" ? 0 : int(parse_int(s, "--hpz-partition-size", 1, std::numeric_limits<int>::max()));
    };
    d.get = [](const O& o) { return o.hpz_partition_size == 0 ? "node" : std::to_string(o.hpz_partition_size); };
    d.check = [](const O& o) {  // 0: the ranks per node
      need(o.hpz_partition_size >= 0, "hpz-partition-size", std::to_string(o.hpz_partition_size), "must be at least 0");
    };
    v.push_back(d);
  }
  v.push_back(real("loss-scale", &O::loss_scale, "fp16: static loss scale (0 = dynamic)", not_negative,
                   "must not be negative (0 = dynamic)", "fp16.loss_scale"));
  v.push_back(integer("initial-scale-power", &O::initial_scale_power, "fp16 dynamic scaling: initial scale 2^N", 0, 64,
                      false, "fp16.initial_scale_power"));
  v.push_back(count("loss-scale-window", &O::loss_scale_window,
                    "fp16 dynamic scaling: steps without overflow before the scale doubles", 1,
                    "fp16.loss_scale_window"));
  v.push_back(integer("hysteresis", &O::hysteresis, "fp16 dynamic scaling: overflows in a row before the scale halves",
                      1, INT64_MAX, false, "fp16.hysteresis"));
  v.push_back(real("min-loss-scale", &O::min_loss_scale, "fp16 dynamic scaling: the scale's floor", positive,
                   "must be positive", "fp16.min_loss_scale"));
  v.push_back(real("comm-timeout", &O::comm_timeout,
                   "seconds a collective may take before the run fails with a message", positive, "must be positive"));
  {
    TrainOption d =
        option("host-mem",
               "host-tier budget per rank (offloaded states and the pinned staging pool), e.g. 64GiB; auto = 90% "
               "of the node's RAM divided among its ranks",
               "auto", false, "");
    d.set = [](O& o, const std::string& s) {
      if (s == "auto") {
        o.host_mem = 0;
        return;
      }
      o.host_mem = parse_bytes(s, "--host-mem");
      STRATA_CHECK(o.host_mem > 0, "--host-mem: 0 is out of range: must be positive (or auto)",
                   "e.g. --host-mem 64GiB");
    };
    d.get = [](const O& o) { return o.host_mem == 0 ? "auto" : bytes_text(o.host_mem); };
    d.check = [](const O&) {};  // 0: auto
    v.push_back(d);
  }
  v.push_back(choice("offload-optimizer", &O::offload_optimizer,
                     "none | cpu | nvme: optimizer states (master, m, v) in host RAM or on NVMe, CPU Adam (stages 1-3)",
                     offload_tiers(), "zero_optimization.offload_optimizer.device"));
  v.push_back(
      choice("offload-param", &O::offload_param,
             "none | cpu | nvme: stage-3 parameters (the optimizer's tier; with --lora-rank, the frozen weights)",
             offload_tiers(), "zero_optimization.offload_param.device"));
  v.push_back(text("nvme-path", &O::nvme_path, "directory for the per-rank NVMe swap files (--offload-* nvme)", {},
                   "zero_optimization.offload_optimizer.nvme_path"));
  v.push_back(integer("aio-queue-depth", &O::aio_queue_depth, "io_uring requests in flight per ring", 1, 4096, false,
                      "aio.queue_depth"));
  v.push_back(bytes("aio-block-size", &O::aio_block_size, "bytes per NVMe request", 4096, 4096, "aio.block_size"));
  v.push_back(flag("nvme-checksum", &O::nvme_checksum, "xxHash64 per block on NVMe, verified on read"));
  v.push_back(real("offload-ratio", &O::offload_ratio,
                   "fraction of the optimizer offloaded (the rest stays on the device)", fraction, "must be in [0, 1]",
                   "zero_optimization.offload_optimizer.ratio"));
  v.push_back(choice(
      "speculative-step", &O::speculative_step,
      "auto | true: CPU Adam during backward, redone if clipping/overflow says so (2 copies of host "
      "states) | false: after the norm (auto: true unless the states are on NVMe and --grad-clip is on)",
      {{"auto", zero::Speculation::automatic}, {"true", zero::Speculation::on}, {"false", zero::Speculation::off}}));
  v.push_back(choice("optimizer-state-dtype", &O::optimizer_state_dtype,
                     "f32 | bf16: Adam's m and v (bf16: 4 B per parameter instead of 8, on the device, in host RAM "
                     "or on NVMe)",
                     state_dtypes(), "bf16.bf16_optimizer_states"));
  v.push_back(choice("master-dtype", &O::master_dtype,
                     "f32 | bf16: the master parameters (bf16: with --precision bf16 they are the compute copy too, "
                     "and norm gains and biases keep an f32 master beside it; --zero-stage 1-3, on the device, in host "
                     "RAM or on NVMe)",
                     state_dtypes(), "bf16.bf16_master_weights_and_grads"));
  v.push_back(choice("state-rounding", &O::state_rounding,
                     "stochastic | nearest: how bf16 optimizer states are rounded (stochastic: from the seed, step "
                     "and element, so resume and any rank count give the same bits)",
                     {{"stochastic", zero::StateRounding::stochastic}, {"nearest", zero::StateRounding::nearest}}));
  v.push_back(integer("pin-buffer-count", &O::pin_buffer_count, "page-locked staging buffers", 1, 4096, false,
                      "zero_optimization.offload_optimizer.buffer_count"));
  v.push_back(bytes("pin-buffer-size", &O::pin_buffer_size, "bytes per staging buffer", 4096, 1,
                    "zero_optimization.offload_optimizer.buffer_size"));
  v.push_back(integer("device-threads", &O::device_threads, "CPU backend: threads for the device's ops (0 = auto)", 0));
  v.push_back(integer("host-threads", &O::host_threads,
                      "CPU backend: threads for the host side, CPU Adam and copies (0 = auto)", 0, INT64_MAX, false,
                      "aio.thread_count"));
  v.push_back(boolean("bind-cpus", &O::bind_cpus,
                      "true: device and host threads on disjoint CPUs when offloading | false", "true"));
  v.push_back(flag("activation-checkpointing", &O::activation_checkpointing,
                   "keep each layer's output only and recompute the layer in backward", "activation_checkpointing"));
  v.push_back(choice("offload-activations", &O::offload_activations, "none | cpu: activation checkpoints in host RAM",
                     {{"none", zero::OffloadTier::none}, {"cpu", zero::OffloadTier::cpu}},
                     "activation_checkpointing.cpu_checkpointing"));
  v.push_back(count("save-every", &O::save_every,
                    "steps between checkpoints in OUT/checkpoints (0 = none; the last step is saved too)", 0));
  v.push_back(count("keep-checkpoints", &O::keep_checkpoints, "complete checkpoints kept, newest first (0 = all)", 0));
  v.push_back(flag("resume", &O::resume,
                   "continue from the newest complete checkpoint in --out (any world size or stage; fresh if none; a "
                   "finished run exits 0)"));
  v.push_back(flag("allow-changes", &O::allow_changes,
                   "with --resume: allow a different --precision, --seq-len, global batch, or optimizer state dtype or "
                   "rounding than the checkpoint's"));
  return v;
}

}  // namespace

const std::vector<TrainOption>& train_options() {
  static const std::vector<TrainOption> options = make_options();
  return options;
}

const TrainOption* find_train_option(std::string_view name) {
  for (const TrainOption& o : train_options())
    if (o.name == name) return &o;
  return nullptr;
}

// Each option's own range from the registry, then the rules that tie options together.
void validate_options(const TrainOptions& o) {
  for (const TrainOption& d : train_options()) d.check(o);
  using zero::OffloadTier;
  STRATA_CHECK(o.offload_param == OffloadTier::none || o.offload_param == o.offload_optimizer || o.lora(),
               "--offload-param " + option_value(o, "offload-param") + " with --offload-optimizer " +
                   option_value(o, "offload-optimizer"),
               "offloaded parameters live where the optimizer that updates them lives: give both the same tier");
  STRATA_CHECK(!o.lora() || o.offload_param == OffloadTier::none || o.zero_stage == 3,
               "--offload-param " + option_value(o, "offload-param") + " with --lora-rank at --zero-stage " +
                   std::to_string(o.zero_stage),
               "the frozen weights are offloaded where they are partitioned: use --zero-stage 3");
  STRATA_CHECK(o.offload_param != OffloadTier::nvme || !o.nvme_path.empty(), "--offload-param nvme without --nvme-path",
               "give --nvme-path DIR on a local NVMe (or SSD) file system");
  STRATA_CHECK(o.offload_optimizer != OffloadTier::nvme || !o.nvme_path.empty(),
               "--offload-optimizer nvme without --nvme-path",
               "give --nvme-path DIR on a local NVMe (or SSD) file system");
  STRATA_CHECK(o.offload_activations == OffloadTier::none || o.activation_checkpointing,
               "--offload-activations cpu without --activation-checkpointing",
               "the checkpoints are what goes to host RAM: add --activation-checkpointing");
  STRATA_CHECK(
      o.eval_data.empty() || o.eval_fraction == 0, "--eval-data with --eval-fraction",
      "validate on a file of its own (--eval-data) or on a held-out part of --data (--eval-fraction), not both");
  STRATA_CHECK(o.eval_enabled() || (o.eval_every == 0 && o.eval_batches == 0),
               "--eval-every or --eval-batches without validation data", "add --eval-data FILE or --eval-fraction F");
}

LoraConfig LoraOptions::lora_config() const {
  LoraConfig c;
  c.rank = lora_rank, c.alpha = lora_alpha, c.dropout = lora_dropout, c.init = lora_init;
  for (size_t at = 0; at < lora_targets.size();) {
    const size_t comma = std::min(lora_targets.find(',', at), lora_targets.size());
    std::string name = lora_targets.substr(at, comma - at);
    name.erase(0, name.find_first_not_of(' '));
    name.erase(name.find_last_not_of(' ') + 1);
    if (!name.empty()) c.targets.push_back(name);
    at = comma + 1;
  }
  return c;
}

std::string option_value(const TrainOptions& o, std::string_view name) {
  const TrainOption* d = find_train_option(name);
  STRATA_CHECK(d, "no option --" + std::string(name), "this is a bug in the caller");
  return d->get(o);
}

}  // namespace strata
