// `strata train`: one option table (cxxopts) generates the help and parses every value;
// values are then checked strictly, and any error names the option.
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.h"
#include "cli/commands.h"
#include "cli/ds_config.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/parse.h"
#include "core/text_file.h"
#include "model/model_spec.h"
#include "train/run_summary.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace strata::cli {

// Ranks as the launcher announces them, before MPI starts (a config's train_batch_size
// needs it to derive the micro-batch or the accumulation).
static int launched_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

int train_main(int argc, char** argv) {
  const TrainOptions d;
  cxxopts::Options o("strata train",
                     "Train a GPT-2 or Llama model. With no options: the embedded default model and data.");
  // Values are taken as strings and parsed strictly below, so "--steps 1x" is an error.
  auto s = [](auto v) { return cxxopts::value<std::string>()->default_value(std::to_string(v)); };
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  auto fmt = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return cxxopts::value<std::string>()->default_value(b);
  };
  o.add_options()("config",
                  "a DeepSpeed-style JSON config, mapped onto these options (values given here win; unknown or "
                  "unimplemented keys are errors)",
                  str(""))("print-config", "print every option's resolved value and where it came from, then exit")(
      "model",
      "model config (JSON: GPT-2 or Llama, Strata's or Hugging Face's config.json) or a Hugging Face "
      "GPT-2/Llama directory (config.json + safetensors weights)",
      str(d.model))(
      "data",
      "training data: token file (.bin/.u16 uint16, .u32 uint32, llm.c .bin), text (.txt, byte-level), or "
      "fine-tuning JSONL (.jsonl: {\"prompt\", \"completion\"} per line, loss on the completion only)",
      str(d.data))("data-format", "auto | u16 | u32 | text | jsonl", str(d.data_format))(
      "tokenizer",
      "for JSONL text: a sentencepiece tokenizer.model, or 'bytes' (default: tokenizer.model in the --model "
      "directory)",
      str(d.tokenizer))("steps", "optimizer steps", s(d.steps))(
      "micro-batch", "sequences per micro-batch", s(d.micro_batch))("grad-accum", "micro-batches accumulated per step",
                                                                    s(d.grad_accum))(
      "seq-len", "tokens per sequence", s(d.seq_len))("lr", "peak learning rate", fmt(d.lr))(
      "warmup", "linear warmup steps", s(d.warmup))(
      "lr-decay", "after warmup: cosine | linear | constant (down to --min-lr-ratio at the last step)",
      str(d.lr_decay))("min-lr-ratio", "cosine decay floor as a fraction of --lr", fmt(d.min_lr_ratio))(
      "weight-decay", "AdamW decoupled weight decay (matmul weights and embeddings)", fmt(d.weight_decay))(
      "beta1", "Adam beta1", fmt(d.beta1))("beta2", "Adam beta2", fmt(d.beta2))("eps", "Adam epsilon", fmt(d.eps))(
      "grad-clip", "global gradient-norm clip (0 = off)", fmt(d.grad_clip))(
      "precision", "f32 | bf16 | f16 (16-bit compute and gradients, f32 master weights; f16 with loss scaling)",
      str("f32"))("seed", "random seed (weights and data order)", s(d.seed))(
      "out", "output directory (metrics.jsonl)", str(d.out))("log-every", "steps between logged metrics",
                                                             s(d.log_every))(
      "threads", "CPU threads for ops (0 = all)", s(d.threads))("pin-threads",
                                                                "pin the OpenMP threads one per physical core")(
      "adam-isa", "CPU Adam kernel: auto | scalar | avx2 | avx512", str(d.adam_isa))(
      "device",
      "auto | cpu | cuda: the backend (auto: cuda when this build has CUDA and a GPU is visible, else the CPU)",
      str(d.device))("device-mem", "device memory budget, e.g. 8GiB", str("8GiB"))(
      "zero-stage",
      "ZeRO stage: 0 replicated, 1 +optimizer states, 2 +gradients, 3 +parameters partitioned (under mpirun)",
      s(d.zero_stage))("sub-group-size", "parameters per partitioned sub-group", s(d.sub_group_size))(
      "reduce-bucket-size", "elements (all ranks) per gradient reduce-scatter/all-reduce bucket",
      s(d.reduce_bucket_size))("allgather-bucket-size",
                               "elements (all ranks) per parameter all-gather bucket (stages 1-2)",
                               s(d.allgather_bucket_size))(
      "overlap-comm", "run communication on its own stream, overlapped with backward (true | false)", str("true"))(
      "prefetch-depth", "stage 3: units gathered ahead of use", s(d.prefetch_depth))(
      "prefetch-bucket-size", "stage 3: elements gathered ahead of use (> 0 overrides --prefetch-depth)",
      s(d.prefetch_bucket_size))("param-persistence-threshold",
                                 "stage 3: parameters with fewer elements stay whole on every rank",
                                 s(d.param_persistence_threshold))(
      "max-live-params", "stage 3: gathered parameter elements at once (0 = from --prefetch-depth)",
      s(d.max_live_params))("hpz-partition-size",
                            "stage 3: ranks per secondary parameter partition, kept after the forward gather so "
                            "backward gathers within it (ZeRO++ hpZ): 1 = none, node = the ranks per node",
                            str("1"))("loss-scale", "fp16: static loss scale (0 = dynamic)", fmt(d.loss_scale))(
      "initial-scale-power", "fp16 dynamic scaling: initial scale 2^N", s(d.initial_scale_power))(
      "loss-scale-window", "fp16 dynamic scaling: steps without overflow before the scale doubles",
      s(d.loss_scale_window))("hysteresis", "fp16 dynamic scaling: overflows in a row before the scale halves",
                              s(d.hysteresis))("min-loss-scale", "fp16 dynamic scaling: the scale's floor",
                                               fmt(d.min_loss_scale))(
      "comm-timeout", "seconds a collective may take before the run fails with a message", fmt(d.comm_timeout))(
      "host-mem",
      "host-tier budget per rank (offloaded states and the pinned staging pool), e.g. 64GiB; auto = 90% of the "
      "node's RAM divided among its ranks",
      str("auto"))("offload-optimizer",
                   "none | cpu | nvme: optimizer states (master, m, v) in host RAM or on NVMe, CPU Adam (stages 1-3)",
                   str(d.offload_optimizer))(
      "offload-param", "none | cpu | nvme: stage-3 parameters (the optimizer's tier)", str(d.offload_param))(
      "nvme-path", "directory for the per-rank NVMe swap files (--offload-* nvme)", str(""))(
      "aio-queue-depth", "io_uring requests in flight per ring", s(d.aio_queue_depth))(
      "aio-block-size", "bytes per NVMe request", str("1MiB"))("nvme-checksum",
                                                               "xxHash64 per block on NVMe, verified on read")(
      "offload-ratio", "fraction of the optimizer offloaded (the rest stays on the device)", fmt(d.offload_ratio))(
      "speculative-step",
      "true: CPU Adam during backward, redone if clipping/overflow says so (2 copies of host states) | false",
      str("true"))("pin-buffer-count", "page-locked staging buffers", s(d.pin_buffer_count))(
      "pin-buffer-size", "bytes per staging buffer", str("16MiB"))(
      "device-threads", "CPU backend: threads for the device's ops (0 = auto)", s(d.device_threads))(
      "host-threads", "CPU backend: threads for the host side, CPU Adam and copies (0 = auto)", s(d.host_threads))(
      "bind-cpus", "true: device and host threads on disjoint CPUs when offloading | false", str("true"))(
      "activation-checkpointing", "keep each layer's output only and recompute the layer in backward")(
      "offload-activations", "none | cpu: activation checkpoints in host RAM", str(d.offload_activations))(
      "save-every", "steps between checkpoints in OUT/checkpoints (0 = none; the last step is saved too)",
      s(d.save_every))("keep-checkpoints", "complete checkpoints kept, newest first (0 = all)", s(d.keep_checkpoints))(
      "resume",
      "continue from the newest complete checkpoint in --out (any world size or stage; fresh if none; a finished "
      "run exits 0)")("allow-changes",
                      "with --resume: allow a different --precision, --seq-len or global batch than the checkpoint's")(
      "summary",
      "write the run's summary to this JSON file: tokens/s, TFLOP/s per device, MFU, peak bytes per tier, "
      "collective bytes, overlap (first step untimed; strata bench suite reads it)",
      str(""))("peak-tflops", "the device's peak TFLOP/s for the summary's MFU (0 = unknown: no MFU)", str("0"))(
      "h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "train", r)) return *done;
  // A config file becomes more arguments, placed only where the command line gave none, and
  // the whole is parsed again: one parser, one set of checks, the options stay the truth.
  const cxxopts::ParseResult typed = r;
  std::vector<ConfigSetting> from_config;
  std::vector<std::string> injected;
  if (const std::string config = r["config"].as<std::string>(); !config.empty()) {
    try {
      from_config = translate_ds_config(config, launched_world_size());
    } catch (const Error& e) {
      return usage_error("train", e.what_failed() + (e.hint().empty() ? "" : " (" + e.hint() + ")"));
    }
    std::vector<std::string> flags;
    for (const auto& g : o.groups())
      for (const auto& h : o.group_help(g).options)
        if (h.is_boolean) flags.push_back(h.l.front());
    for (const ConfigSetting& c : from_config) {
      if (typed.count(c.option)) continue;
      if (std::find(flags.begin(), flags.end(), c.option) != flags.end()) {
        if (c.value == "true") injected.push_back("--" + c.option);
      } else {
        injected.push_back("--" + c.option + "=" + c.value);
      }
    }
    std::vector<const char*> args(argv, argv + argc);
    for (const std::string& a : injected) args.push_back(a.c_str());
    if (auto done = parse_options(o, int(args.size()), const_cast<char**>(args.data()), "train", r)) return *done;
  }
  if (r.count("print-config")) {
    for (const auto& g : o.groups())
      for (const auto& h : o.group_help(g).options) {
        const std::string& name = h.l.front();
        if (name == "help" || name == "print-config" || name == "config") continue;
        const std::string value = h.is_boolean ? (r.count(name) ? "true" : "false") : r[name].as<std::string>();
        std::string from = typed.count(name) ? "command line" : "default";
        for (const ConfigSetting& c : from_config)
          if (c.option == name && !typed.count(name)) from = c.from;
        std::printf("--%-30s %-24s %s\n", name.c_str(), value.c_str(), from.c_str());
      }
    return 0;
  }
  TrainOptions t;
  const std::string summary = r["summary"].as<std::string>();
  double peak_tflops = 0;
  try {
    auto gi = [&](const char* k) { return parse_int(r[k].as<std::string>(), std::string("--") + k); };
    auto gint = [&](const char* k) { return parse_int32(r[k].as<std::string>(), std::string("--") + k); };
    auto gd = [&](const char* k) { return parse_double(r[k].as<std::string>(), std::string("--") + k); };
    t.model = r["model"].as<std::string>();
    t.data = r["data"].as<std::string>();
    t.data_format = r["data-format"].as<std::string>();
    t.tokenizer = r["tokenizer"].as<std::string>();
    t.steps = gi("steps");
    t.micro_batch = gint("micro-batch");
    t.grad_accum = gint("grad-accum");
    t.seq_len = gint("seq-len");
    t.lr = gd("lr");
    t.warmup = gi("warmup");
    t.lr_decay = r["lr-decay"].as<std::string>();
    t.min_lr_ratio = gd("min-lr-ratio");
    t.weight_decay = gd("weight-decay");
    t.beta1 = gd("beta1");
    t.beta2 = gd("beta2");
    t.eps = gd("eps");
    t.grad_clip = gd("grad-clip");
    const std::string prec = r["precision"].as<std::string>();
    if (prec != "f32" && prec != "bf16" && prec != "f16")
      return usage_error("train", "--precision: '" + prec + "' is not f32, bf16 or f16");
    t.precision = parse_dtype(prec);
    t.seed = uint64_t(parse_int(r["seed"].as<std::string>(), "--seed", 0));
    t.out = r["out"].as<std::string>();
    t.log_every = gi("log-every");
    t.threads = gint("threads");
    t.adam_isa = r["adam-isa"].as<std::string>();
    t.pin_threads = r.count("pin-threads") > 0;
    t.device = r["device"].as<std::string>();
    t.device_mem = parse_bytes(r["device-mem"].as<std::string>(), "--device-mem");
    t.zero_stage = gint("zero-stage");
    t.sub_group_size = gi("sub-group-size");
    auto gc = [&](const char* k) { return parse_count(r[k].as<std::string>(), std::string("--") + k); };
    auto gc32 = [&](const char* k) {  // a count stored as int
      const int64_t v = gc(k);
      STRATA_CHECK(v <= std::numeric_limits<int>::max(),
                   std::string("--") + k + ": " + std::to_string(v) + " is out of range (at most 2147483647)",
                   "give a smaller count");
      return int(v);
    };
    t.reduce_bucket_size = gc("reduce-bucket-size");
    t.allgather_bucket_size = gc("allgather-bucket-size");
    t.prefetch_depth = gc32("prefetch-depth");
    t.prefetch_bucket_size = gc("prefetch-bucket-size");
    t.param_persistence_threshold = gc("param-persistence-threshold");
    t.max_live_params = gc("max-live-params");
    if (const std::string h = r["hpz-partition-size"].as<std::string>(); h == "node")
      t.hpz_partition_size = 0;
    else
      t.hpz_partition_size = int(parse_int(h, "--hpz-partition-size", 1, std::numeric_limits<int>::max()));
    const std::string overlap = r["overlap-comm"].as<std::string>();
    if (overlap != "true" && overlap != "false")
      return usage_error("train", "--overlap-comm: '" + overlap + "' is not true or false");
    t.overlap_comm = overlap == "true";
    t.loss_scale = gd("loss-scale");
    t.initial_scale_power = gint("initial-scale-power");
    t.loss_scale_window = gc("loss-scale-window");
    t.hysteresis = gint("hysteresis");
    t.min_loss_scale = gd("min-loss-scale");
    auto boolean = [&](const char* k, bool& out) {
      const std::string v = r[k].as<std::string>();
      if (v != "true" && v != "false")
        throw_error(std::string("--") + k + ": '" + v + "' is not true or false", "use true or false");
      out = v == "true";
    };
    if (const std::string h = r["host-mem"].as<std::string>(); h != "auto") {
      t.host_mem = parse_bytes(h, "--host-mem");
      STRATA_CHECK(t.host_mem > 0, "--host-mem: 0 is out of range: must be positive (or auto)",
                   "e.g. --host-mem 64GiB");
    }
    t.offload_optimizer = r["offload-optimizer"].as<std::string>();
    t.offload_param = r["offload-param"].as<std::string>();
    t.nvme_path = r["nvme-path"].as<std::string>();
    t.aio_queue_depth = gint("aio-queue-depth");
    t.aio_block_size = parse_bytes(r["aio-block-size"].as<std::string>(), "--aio-block-size");
    t.nvme_checksum = r.count("nvme-checksum") > 0;
    t.offload_ratio = gd("offload-ratio");
    boolean("speculative-step", t.speculative_step);
    boolean("bind-cpus", t.bind_cpus);
    t.pin_buffer_count = gint("pin-buffer-count");
    t.pin_buffer_size = parse_bytes(r["pin-buffer-size"].as<std::string>(), "--pin-buffer-size");
    t.activation_checkpointing = r.count("activation-checkpointing") > 0;
    t.offload_activations = r["offload-activations"].as<std::string>();
    t.device_threads = gint("device-threads");
    t.host_threads = gint("host-threads");
    t.comm_timeout = gd("comm-timeout");
    t.save_every = gc("save-every");
    t.keep_checkpoints = gc32("keep-checkpoints");
    t.resume = r.count("resume") > 0;
    t.allow_changes = r.count("allow-changes") > 0;
    validate_options(t);       // every range, in one place
    resolve_device(t.device);  // cuda where this build or machine lacks it: say which, now
    peak_tflops = parse_double(r["peak-tflops"].as<std::string>(), "--peak-tflops");
    STRATA_CHECK(peak_tflops >= 0,
                 "--peak-tflops: " + r["peak-tflops"].as<std::string>() + " is out of range: must not be negative",
                 "0 = unknown");
  } catch (const Error& e) {
    return usage_error("train", e.what_failed() + (e.hint().empty() ? "" : " (" + e.hint() + ")"));
  }
  // SIGINT/SIGTERM: every rank finishes its step, saves (with --save-every) and exits 128+N.
  // Before MPI starts, so that its threads, like all later ones, leave the signals to one.
  install_stop_handlers();
  // Under mpirun/srun every rank trains its slice of the global batch.
  std::unique_ptr<MpiComm> comm;
  if (MpiComm::launched_by_mpi()) {
    comm = std::make_unique<MpiComm>(MpiCommOptions{t.comm_timeout, true, true});
    t.comm = comm.get();
  }
  const TrainResult result = train(t);
  if (!summary.empty() && !result.steps.empty()) {
    const nlohmann::ordered_json j =
        summarize_run(t, result, ModelSpec::load(resolve_model(t.model)), peak_tflops * 1e12);
    if (!t.comm || t.comm->rank() == 0) write_text_file(summary, j.dump(2) + "\n");
  }
  return result.stop_signal ? 128 + result.stop_signal : 0;
}

}  // namespace strata::cli
