#include "cli/ds_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace strata::cli {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

namespace {

using nlohmann::json;

// One JSON object being read: each key must be claimed by exactly one handler.
class Block {
 public:
  Block(const json& j, std::string path, std::string file) : j_(j), path_(std::move(path)), file_(std::move(file)) {
    STRATA_CHECK(j.is_object(), where("") + " must be a JSON object", "see the DeepSpeed config reference");
  }
  std::string where(const std::string& key) const {
    const std::string p = path_.empty() ? key : key.empty() ? path_ : path_ + "." + key;
    return "config '" + file_ + "': " + (p.empty() ? std::string("the top level") : "'" + p + "'");
  }
  std::string from(const std::string& key) const { return file_ + ": " + (path_.empty() ? key : path_ + "." + key); }
  const json* get(const std::string& key) {
    known_.push_back(key);
    auto it = j_.find(key);
    if (it == j_.end()) return nullptr;
    // Hugging Face Trainer's "auto" placeholders are filled by the Trainer, not a config value.
    STRATA_CHECK(!(it->is_string() && it->get<std::string>() == "auto"), where(key) + " is \"auto\"",
                 "\"auto\" is filled in by the Hugging Face Trainer; give the value itself");
    return &*it;
  }
  // Keys Strata understands but does not implement: refused unless they ask for what Strata
  // does anyway (`accepted(value)`).
  template <typename Accept>
  void unsupported(const std::string& key, Accept accepted, const std::string& why) {
    if (const json* v = get(key))
      STRATA_CHECK(accepted(*v), where(key) + " = " + v->dump() + " is not implemented in Strata", why);
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) != known_.end()) continue;
      std::string best;
      size_t best_d = SIZE_MAX;
      for (const std::string& k : known_)
        if (size_t d = edit_distance(it.key(), k); d < best_d) best_d = d, best = k;
      throw_error(where(it.key()) + " is not a key Strata knows", best_d <= std::max<size_t>(3, it.key().size() / 3)
                                                                      ? "did you mean '" + best + "'?"
                                                                      : "see the README's table of config keys");
    }
  }
  double number(const std::string& key, const json& v) const {
    STRATA_CHECK(v.is_number(), where(key) + " = " + v.dump() + " is not a number", "give a number");
    return v.get<double>();
  }
  // Integers may be written 5e8, as DeepSpeed's examples do.
  long long integer(const std::string& key, const json& v) const {
    const double d = number(key, v);
    STRATA_CHECK(d == std::floor(d) && std::fabs(d) < 9e15, where(key) + " = " + v.dump() + " is not an integer",
                 "give a whole number");
    return (long long)d;
  }
  bool boolean(const std::string& key, const json& v) const {
    STRATA_CHECK(v.is_boolean(), where(key) + " = " + v.dump() + " is not true or false", "give true or false");
    return v.get<bool>();
  }
  std::string string(const std::string& key, const json& v) const {
    STRATA_CHECK(v.is_string(), where(key) + " = " + v.dump() + " is not a string", "give a string");
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string path_, file_;
  std::vector<std::string> known_;
};

// The shortest text that reads back as the same double.
std::string num(double v) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

}  // namespace

std::vector<ConfigSetting> translate_ds_config(const std::string& path, int world) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "cannot open config '" + path + "'", "check --config");
  std::stringstream ss;
  ss << f.rdbuf();
  return translate_ds_config_text(ss.str(), path, world);
}

std::vector<ConfigSetting> translate_ds_config_text(const std::string& text, const std::string& path, int world) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for huge numbers
    throw_error("config '" + path + "' is not valid JSON: " + std::string(e.what()), "fix the file's syntax");
  }
  std::vector<ConfigSetting> out;
  auto set = [&](const std::string& option, const std::string& value, const std::string& from) {
    for (ConfigSetting& s : out)
      if (s.option == option) {
        STRATA_CHECK(s.value == value,
                     "config '" + path + "': " + s.from + " = " + s.value + " and " + from + " = " + value +
                         " both set --" + option,
                     "make them agree or drop one");
        return;
      }
    out.push_back({option, value, from});
  };
  // key of block b → --option, read as `kind`, when present.
  enum class Kind { integer, number, text };
  auto map_key = [&](Block& b, const std::string& key, const std::string& option, Kind kind) {
    const json* e = b.get(key);
    if (!e) return;
    set(option,
        kind == Kind::integer  ? std::to_string(b.integer(key, *e))
        : kind == Kind::number ? num(b.number(key, *e))
                               : b.string(key, *e),
        b.from(key));
  };
  auto yes = [](const json& v) { return v.is_boolean() && v.get<bool>(); };
  auto no = [](const json& v) { return v.is_boolean() && !v.get<bool>(); };
  Block top(j, "", path);

  // The batch triple: any two determine the third.
  std::optional<long long> tb, mb, ga;
  if (const json* v = top.get("train_batch_size")) tb = top.integer("train_batch_size", *v);
  if (const json* v = top.get("train_micro_batch_size_per_gpu")) mb = top.integer("train_micro_batch_size_per_gpu", *v);
  if (const json* v = top.get("gradient_accumulation_steps")) ga = top.integer("gradient_accumulation_steps", *v);
  for (auto [name, v] :
       {std::pair{"train_batch_size", tb}, {"train_micro_batch_size_per_gpu", mb}, {"gradient_accumulation_steps", ga}})
    STRATA_CHECK(!v || *v > 0, top.where(name) + " must be positive", "fix the config");
  const std::string W = std::to_string(world);
  if (tb && mb && ga) {
    STRATA_CHECK(*tb == *mb * *ga * world,
                 "config '" + path + "': train_batch_size " + std::to_string(*tb) +
                     " is not train_micro_batch_size_per_gpu × gradient_accumulation_steps × ranks = " +
                     std::to_string(*mb) + " × " + std::to_string(*ga) + " × " + W,
                 "give any two of the three and Strata derives the third");
  } else if (tb && mb) {
    STRATA_CHECK(*tb % (*mb * world) == 0,
                 "config '" + path + "': train_batch_size " + std::to_string(*tb) +
                     " is not a multiple of train_micro_batch_size_per_gpu × ranks = " + std::to_string(*mb * world),
                 "fix the batch sizes for " + W + " rank(s)");
    ga = *tb / (*mb * world);
  } else if (tb && ga) {
    STRATA_CHECK(*tb % (*ga * world) == 0,
                 "config '" + path + "': train_batch_size " + std::to_string(*tb) +
                     " is not a multiple of gradient_accumulation_steps × ranks = " + std::to_string(*ga * world),
                 "fix the batch sizes for " + W + " rank(s)");
    mb = *tb / (*ga * world);
  } else if (tb) {
    STRATA_CHECK(
        *tb % world == 0,
        "config '" + path + "': train_batch_size " + std::to_string(*tb) + " is not a multiple of " + W + " rank(s)",
        "fix the batch size");
    mb = *tb / world, ga = 1;
  }
  const std::string batch_from = path + ": " + (tb ? "train_batch_size" : "") + (tb && (mb || ga) ? "/" : "") +
                                 (mb ? "train_micro_batch_size_per_gpu" : "");
  if (mb) set("micro-batch", std::to_string(*mb), tb ? batch_from : top.from("train_micro_batch_size_per_gpu"));
  if (ga)
    set("grad-accum", std::to_string(*ga),
        tb ? path + ": train_batch_size/gradient_accumulation_steps" : top.from("gradient_accumulation_steps"));

  map_key(top, "gradient_clipping", "grad-clip", Kind::number);
  map_key(top, "steps_per_print", "log-every", Kind::integer);
  top.unsupported("wall_clock_breakdown", no, "Strata logs its step timeline to metrics.jsonl always");
  top.unsupported(
      "zero_allow_untested_optimizer", [](const json&) { return true; }, "");
  top.unsupported("prescale_gradients", no, "Strata averages gradients after the reduction");
  top.unsupported(
      "gradient_predivide_factor", [](const json& v) { return v.is_number() && v.get<double>() == 1.0; },
      "Strata divides once, after the reduction");
  top.unsupported(
      "communication_data_type", [](const json& v) { return v.is_null(); },
      "Strata reduces gradients in the compute dtype (f32 or bf16/f16)");
  top.unsupported("sparse_gradients", no, "Strata's gradients are dense");
  top.unsupported(
      "amp", [](const json& v) { return v.is_object() && v.value("enabled", false) == false; },
      "use the bf16 or fp16 block");
  for (const char* k : {"flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "elasticity", "autotuning",
                        "compression_training", "data_efficiency", "curriculum_learning"})
    top.unsupported(
        k, [](const json& v) { return v.is_object() && v.value("enabled", false) == false; },
        "Strata writes metrics.jsonl; this feature is not part of it");

  // Precision.
  bool bf16 = false, fp16 = false;
  if (const json* v = top.get("bf16")) {
    Block b(*v, "bf16", path);
    if (const json* e = b.get("enabled")) bf16 = b.boolean("enabled", *e);
    b.unsupported(
        "immediate_grad_update", [](const json&) { return true; }, "");
    b.finish();
  }
  if (const json* v = top.get("fp16")) {
    Block b(*v, "fp16", path);
    if (const json* e = b.get("enabled")) fp16 = b.boolean("enabled", *e);
    map_key(b, "loss_scale", "loss-scale", Kind::number);
    map_key(b, "initial_scale_power", "initial-scale-power", Kind::integer);
    map_key(b, "loss_scale_window", "loss-scale-window", Kind::integer);
    map_key(b, "hysteresis", "hysteresis", Kind::integer);
    map_key(b, "min_loss_scale", "min-loss-scale", Kind::number);
    b.unsupported("consecutive_hysteresis", no, "Strata's hysteresis counts overflows in a row (DeepSpeed's default)");
    b.unsupported("auto_cast", no, "Strata casts inputs itself");
    b.finish();
  }
  STRATA_CHECK(!(bf16 && fp16), "config '" + path + "': bf16 and fp16 are both enabled", "enable one of them");
  if (bf16) set("precision", "bf16", path + ": bf16.enabled");
  if (fp16) set("precision", "f16", path + ": fp16.enabled");

  // Optimizer: Adam/AdamW, decoupled weight decay.
  if (const json* v = top.get("optimizer")) {
    Block b(*v, "optimizer", path);
    std::string type = "AdamW";
    if (const json* t = b.get("type")) type = b.string("type", *t);
    std::string lower = type;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    STRATA_CHECK(lower == "adam" || lower == "adamw", b.where("type") + " = \"" + type + "\" is not implemented",
                 "Strata's optimizer is AdamW (type Adam or AdamW)");
    if (const json* p = b.get("params")) {
      Block q(*p, "optimizer.params", path);
      map_key(q, "lr", "lr", Kind::number);
      if (const json* e = q.get("betas")) {
        STRATA_CHECK(e->is_array() && e->size() == 2 && (*e)[0].is_number() && (*e)[1].is_number(),
                     q.where("betas") + " = " + e->dump() + " is not [beta1, beta2]", "e.g. [0.9, 0.999]");
        set("beta1", num((*e)[0].get<double>()), q.from("betas"));
        set("beta2", num((*e)[1].get<double>()), q.from("betas"));
      }
      map_key(q, "eps", "eps", Kind::number);
      map_key(q, "weight_decay", "weight-decay", Kind::number);
      // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (L2 regularisation).
      q.unsupported("adam_w_mode", yes, "Strata's Adam decouples weight decay (AdamW)");
      q.unsupported("torch_adam", no, "Strata uses its own fused CPU Adam");
      q.unsupported("amsgrad", no, "Strata's AdamW has no AMSGrad variant");
      q.unsupported("bias_correction", yes, "Strata's AdamW always corrects the moments' bias");
      q.finish();
    }
    b.finish();
  }

  // Scheduler: linear warmup from 0, then constant, linear or cosine decay.
  if (const json* v = top.get("scheduler")) {
    Block b(*v, "scheduler", path);
    const json* t = b.get("type");
    STRATA_CHECK(t, b.where("type") + " is missing", "use WarmupLR, WarmupDecayLR or WarmupCosineLR");
    const std::string type = b.string("type", *t);
    STRATA_CHECK(type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR",
                 b.where("type") + " = \"" + type + "\" is not implemented",
                 "Strata schedules WarmupLR, WarmupDecayLR and WarmupCosineLR");
    set("lr-decay", type == "WarmupLR" ? "constant" : type == "WarmupDecayLR" ? "linear" : "cosine", b.from("type"));
    if (const json* p = b.get("params")) {
      Block q(*p, "scheduler.params", path);
      map_key(q, "warmup_num_steps", "warmup", Kind::integer);
      // DeepSpeed's default warmup is logarithmic; Strata's is linear, so say it.
      const json* wt = q.get("warmup_type");
      STRATA_CHECK(wt && wt->is_string() && wt->get<std::string>() == "linear",
                   q.where("warmup_type") + (wt ? " = " + wt->dump() : std::string(" (DeepSpeed's default \"log\")")) +
                       " is not implemented",
                   "Strata warms up linearly: set \"warmup_type\": \"linear\"");
      if (type == "WarmupCosineLR") {
        map_key(q, "cos_min_ratio", "min-lr-ratio", Kind::number);
        q.unsupported(
            "warmup_min_ratio", [](const json& e) { return e.is_number() && e.get<double>() == 0; },
            "Strata warms up from 0");
        map_key(q, "total_num_steps", "steps", Kind::integer);
      } else {
        map_key(q, "warmup_max_lr", "lr", Kind::number);
        q.unsupported(
            "warmup_min_lr", [](const json& e) { return e.is_number() && e.get<double>() == 0; },
            "Strata warms up from 0");
        if (type == "WarmupDecayLR") {
          set("min-lr-ratio", "0", q.from("total_num_steps") + " (WarmupDecayLR decays to 0)");
          map_key(q, "total_num_steps", "steps", Kind::integer);
        }
      }
      q.unsupported(
          "last_batch_iteration", [](const json& e) { return e.is_number() && e.get<double>() == -1; },
          "resume with --resume instead");
      q.finish();
    }
    b.finish();
  }

  // ZeRO.
  if (const json* v = top.get("zero_optimization")) {
    Block b(*v, "zero_optimization", path);
    map_key(b, "stage", "zero-stage", Kind::integer);
    if (const json* e = b.get("overlap_comm"))
      set("overlap-comm", b.boolean("overlap_comm", *e) ? "true" : "false", b.from("overlap_comm"));
    b.unsupported("contiguous_gradients", yes, "Strata's gradients are always contiguous per bucket");
    b.unsupported("reduce_scatter", yes, "Strata always reduce-scatters (stages 1-3)");
    b.unsupported("allgather_partitions", yes, "Strata always all-gathers partitions");
    b.unsupported("round_robin_gradients", no, "Strata partitions gradients contiguously");
    b.unsupported("load_from_fp32_weights", yes, "Strata resumes from the f32 master");
    b.unsupported("stage3_gather_16bit_weights_on_model_save", no,
                  "Strata's checkpoints keep the f32 master; `strata export` writes 16-bit safetensors");
    b.unsupported("gather_16bit_weights_on_model_save", no,
                  "Strata's checkpoints keep the f32 master; `strata export` writes 16-bit safetensors");
    b.unsupported("zero_quantized_weights", no, "Strata gathers weights unquantised");
    b.unsupported("zero_quantized_gradients", no, "Strata reduces gradients unquantised");
    map_key(b, "reduce_bucket_size", "reduce-bucket-size", Kind::integer);
    map_key(b, "allgather_bucket_size", "allgather-bucket-size", Kind::integer);
    map_key(b, "stage3_prefetch_bucket_size", "prefetch-bucket-size", Kind::integer);
    map_key(b, "stage3_param_persistence_threshold", "param-persistence-threshold", Kind::integer);
    map_key(b, "stage3_max_live_parameters", "max-live-params", Kind::integer);
    map_key(b, "sub_group_size", "sub-group-size", Kind::integer);
    map_key(b, "zero_hpz_partition_size", "hpz-partition-size", Kind::integer);
    b.unsupported(
        "stage3_max_reuse_distance", [](const json&) { return true; }, "");
    b.unsupported("cpu_offload", no, "use offload_optimizer {\"device\": \"cpu\"}");
    std::string pin_from;
    for (const char* block : {"offload_optimizer", "offload_param"}) {
      const json* o = b.get(block);
      if (!o) continue;
      Block q(*o, std::string("zero_optimization.") + block, path);
      const std::string option = std::string(block) == "offload_optimizer" ? "offload-optimizer" : "offload-param";
      if (const json* e = q.get("device")) {
        const std::string d = q.string("device", *e);
        STRATA_CHECK(d == "none" || d == "cpu" || d == "nvme", q.where("device") + " = \"" + d + "\"",
                     "use none, cpu or nvme");
        set(option, d, q.from("device"));
      }
      map_key(q, "nvme_path", "nvme-path", Kind::text);
      q.unsupported("pin_memory", yes, "Strata's staging buffers are always page-locked");
      map_key(q, "buffer_count", "pin-buffer-count", Kind::integer);
      map_key(q, "buffer_size", "pin-buffer-size", Kind::integer);
      map_key(q, "ratio", "offload-ratio", Kind::number);
      q.unsupported("fast_init", no, "Strata initialises offloaded states in place");
      q.unsupported(
          "max_in_cpu", [](const json&) { return true; }, "");
      q.unsupported(
          "pipeline_read", [](const json&) { return true; }, "");
      q.unsupported(
          "pipeline_write", [](const json&) { return true; }, "");
      q.finish();
    }
    b.finish();
  }

  if (const json* v = top.get("aio")) {
    Block b(*v, "aio", path);
    map_key(b, "block_size", "aio-block-size", Kind::integer);
    map_key(b, "queue_depth", "aio-queue-depth", Kind::integer);
    // One io_uring per swapping thread: Strata's parallelism is its host threads.
    for (const char* k : {"intra_op_parallelism", "thread_count"})
      if (const json* e = b.get(k)) set("host-threads", std::to_string(b.integer(k, *e)), b.from(k));
    b.unsupported("single_submit", no, "Strata batches its submissions");
    b.unsupported("overlap_events", yes, "Strata always overlaps reads, writes and Adam");
    b.unsupported("use_gds", no, "GPUDirect Storage is not supported");
    b.finish();
  }

  if (const json* v = top.get("activation_checkpointing")) {
    Block b(*v, "activation_checkpointing", path);
    set("activation-checkpointing", "true", top.from("activation_checkpointing") + " (present)");
    if (const json* e = b.get("cpu_checkpointing"))
      if (b.boolean("cpu_checkpointing", *e)) set("offload-activations", "cpu", b.from("cpu_checkpointing"));
    b.unsupported("partition_activations", no, "Strata keeps each rank's checkpoints whole");
    b.unsupported(
        "contiguous_memory_optimization", [](const json&) { return true; }, "");
    b.unsupported(
        "number_checkpoints", [](const json& e) { return e.is_null(); }, "Strata checkpoints every layer");
    b.unsupported("synchronize_checkpoint_boundary", no, "Strata needs no synchronisation there");
    b.unsupported("profile", no, "the step timeline is in metrics.jsonl");
    b.finish();
  }
  top.finish();
  return out;
}

}  // namespace strata::cli
