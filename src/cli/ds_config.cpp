#include "cli/ds_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "cli/ds_config_block.h"
#include "cli/ds_config_defaults.h"
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

// The shortest text that reads back as the same double.
std::string shortest_text(double v) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

// One config's translation: the settings it makes and the notes, one method per DeepSpeed
// config block, each claiming its block's keys.
class Translation {
 public:
  Translation(std::string path, int world) : path_(std::move(path)), world_(world) {}
  std::vector<ConfigSetting>& settings() { return out_; }
  Notes& notes() { return notes_; }

  // --option = value, from `from`; a second setting of an option must agree with the first.
  void set(const std::string& option, const std::string& value, const std::string& from) {
    for (ConfigSetting& s : out_)
      if (s.option == option) {
        STRATA_CHECK(s.value == value,
                     "config '" + path_ + "': " + s.from + " = " + s.value + " and " + from + " = " + value +
                         " both set --" + option,
                     "make them agree or drop one");
        return;
      }
    out_.push_back({option, value, from});
  }
  // key of block b → --option, read as `kind`, when present.
  enum class Kind { integer, number, text };
  void map_key(Block& b, const std::string& key, const std::string& option, Kind kind) {
    const json* e = b.get(key);
    if (!e) return;
    set(option,
        kind == Kind::integer  ? std::to_string(b.integer(key, *e))
        : kind == Kind::number ? shortest_text(b.number(key, *e))
                               : b.string(key, *e),
        b.from(key));
  }

  void batch(Block& top);
  void top_level(Block& top);
  void precision(Block& top);
  void optimizer(Block& top);
  void scheduler(Block& top);
  void zero_optimization(Block& top);
  void aio(Block& top);
  void activation_checkpointing(Block& top);
  void lora(Block& top);
  void stage3_offload();

 private:
  static bool yes(const json& v) { return v.is_boolean() && v.get<bool>(); }
  static bool no(const json& v) { return v.is_boolean() && !v.get<bool>(); }

  std::string path_;
  int world_;
  std::vector<ConfigSetting> out_;
  Notes notes_;
};

// train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps.
void Translation::batch(Block& top) {
  // The batch triple: any two determine the third.
  std::optional<long long> tb, mb, ga;
  if (const json* v = top.get("train_batch_size")) tb = top.integer("train_batch_size", *v);
  if (const json* v = top.get("train_micro_batch_size_per_gpu")) mb = top.integer("train_micro_batch_size_per_gpu", *v);
  if (const json* v = top.get("gradient_accumulation_steps")) ga = top.integer("gradient_accumulation_steps", *v);
  for (auto [name, v] :
       {std::pair{"train_batch_size", tb}, {"train_micro_batch_size_per_gpu", mb}, {"gradient_accumulation_steps", ga}})
    STRATA_CHECK(!v || *v > 0, top.where(name) + " must be positive", "fix the config");
  const std::string W = std::to_string(world_);
  if (tb && mb && ga) {
    STRATA_CHECK(*tb == *mb * *ga * world_,
                 "config '" + path_ + "': train_batch_size " + std::to_string(*tb) +
                     " is not train_micro_batch_size_per_gpu × gradient_accumulation_steps × ranks = " +
                     std::to_string(*mb) + " × " + std::to_string(*ga) + " × " + W,
                 "give any two of the three and Strata derives the third");
  } else if (tb && mb) {
    STRATA_CHECK(*tb % (*mb * world_) == 0,
                 "config '" + path_ + "': train_batch_size " + std::to_string(*tb) +
                     " is not a multiple of train_micro_batch_size_per_gpu × ranks = " + std::to_string(*mb * world_),
                 "fix the batch sizes for " + W + " rank(s)");
    ga = *tb / (*mb * world_);
  } else if (tb && ga) {
    STRATA_CHECK(*tb % (*ga * world_) == 0,
                 "config '" + path_ + "': train_batch_size " + std::to_string(*tb) +
                     " is not a multiple of gradient_accumulation_steps × ranks = " + std::to_string(*ga * world_),
                 "fix the batch sizes for " + W + " rank(s)");
    mb = *tb / (*ga * world_);
  } else if (tb) {
    STRATA_CHECK(
        *tb % world_ == 0,
        "config '" + path_ + "': train_batch_size " + std::to_string(*tb) + " is not a multiple of " + W + " rank(s)",
        "fix the batch size");
    mb = *tb / world_, ga = 1;
  }
  const std::string batch_from = path_ + ": " + (tb ? "train_batch_size" : "") + (tb && (mb || ga) ? "/" : "") +
                                 (mb ? "train_micro_batch_size_per_gpu" : "");
  if (mb) set("micro-batch", std::to_string(*mb), tb ? batch_from : top.from("train_micro_batch_size_per_gpu"));
  if (ga)
    set("grad-accum", std::to_string(*ga),
        tb ? path_ + ": train_batch_size/gradient_accumulation_steps" : top.from("gradient_accumulation_steps"));
}

// The top level's single keys: clipping, logging, and what Strata accepts or refuses.
void Translation::top_level(Block& top) {
  map_key(top, "gradient_clipping", "grad-clip", Kind::number);
  map_key(top, "steps_per_print", "log-every", Kind::integer);
  top.accept("wall_clock_breakdown", "Strata logs its step timeline to metrics.jsonl always");
  top.accept("zero_allow_untested_optimizer", "Strata's optimizer is its own AdamW");
  top.accept("zero_force_ds_cpu_optimizer", "Strata's CPU Adam is its own fused kernel");
  // The same mean gradient either way: where DeepSpeed divides only moves f16 overflow.
  top.accept("prescale_gradients", "Strata averages once, after the reduction (the same mean gradient)");
  top.accept("gradient_predivide_factor", "Strata averages once, after the reduction (the same mean gradient)");
  top.unsupported(
      "communication_data_type", [](const json& v) { return v.is_null(); },
      "Strata reduces gradients in the compute dtype (f32 or bf16/f16)");
  top.unsupported("sparse_gradients", no, "Strata's gradients are dense");
  top.unsupported(
      "amp", [](const json& v) { return v.is_object() && v.value("enabled", false) == false; },
      "use the bf16 or fp16 block");
  // Monitors: they watch the run and change nothing in it. TensorBoard and CSV files are written
  // where DeepSpeed writes them (output_path/job_name); the others need a service or a profiler,
  // and Strata's own record is metrics.jsonl (and --summary's TFLOP/s).
  for (const auto& [k, option] : {std::pair{"tensorboard", "tensorboard"}, std::pair{"csv_monitor", "csv-dir"}})
    if (const json* v = top.get(k)) {
      Block b(*v, k, path_, notes_);
      const json* on = b.get("enabled");
      const json* out = b.get("output_path");
      const json* job = b.get("job_name");
      if (on && b.boolean("enabled", *on)) {
        const std::string dir = out ? b.string("output_path", *out) : "";
        const std::string name = job ? b.string("job_name", *job) : "DeepSpeedJobName";  // DeepSpeed's default
        set(option, dir.empty() ? name : dir + (dir.ends_with("/") ? "" : "/") + name, b.from("enabled"));
      }
      b.finish();
    }
  for (const char* k : {"flops_profiler", "wandb", "comet"})
    top.accept(k,
               "not produced: nothing is sent to a service; Strata records every step in metrics.jsonl "
               "(TFLOP/s with --summary), and --tensorboard and --csv-dir write files");
  for (const char* k : {"elasticity", "autotuning", "compression_training", "data_efficiency", "curriculum_learning"})
    top.unsupported(
        k, [](const json& v) { return v.is_object() && v.value("enabled", false) == false; },
        "Strata writes metrics.jsonl; this feature is not part of it");
}

// bf16 (or its older name bfloat16) and fp16.
void Translation::precision(Block& top) {
  bool bf16 = false, fp16 = false;
  for (const char* name : {"bf16", "bfloat16"}) {  // "bfloat16": DeepSpeed's older name
    const json* v = top.get(name);
    if (!v) continue;
    Block b(*v, name, path_, notes_);
    if (const json* e = b.get("enabled")) bf16 = bf16 || b.boolean("enabled", *e);
    b.accept("immediate_grad_update", "Strata applies the update once per step");
    // DeepSpeed's 16-bit optimizer states (2026-05): a bf16 master and gradients, and bf16 m
    // and v on top of it. Strata's gradients are already in the compute dtype; its bf16
    // states round stochastically unless --state-rounding nearest (DeepSpeed's rounding).
    if (const json* e = b.get("bf16_master_weights_and_grads"))
      if (b.boolean("bf16_master_weights_and_grads", *e))
        set("master-dtype", "bf16", path_ + ": " + name + ".bf16_master_weights_and_grads");
    if (const json* e = b.get("bf16_optimizer_states"))
      if (b.boolean("bf16_optimizer_states", *e)) {
        const json* master = b.get("bf16_master_weights_and_grads");
        STRATA_CHECK(master && master->is_boolean() && master->get<bool>(),
                     "config '" + path_ + "': " + name + ".bf16_optimizer_states without bf16_master_weights_and_grads",
                     "DeepSpeed requires both; Strata's --optimizer-state-dtype bf16 alone keeps an f32 master: "
                     "enable bf16_master_weights_and_grads too, or pass --optimizer-state-dtype bf16 instead");
        set("optimizer-state-dtype", "bf16", path_ + ": " + name + ".bf16_optimizer_states");
      }
    // fp16's loss-scaling keys copied into bf16 blocks: DeepSpeed ignores them for bf16.
    for (const char* k : {"loss_scale", "loss_scale_window", "hysteresis", "min_loss_scale", "initial_scale_power"})
      b.accept(k, "bf16 needs no loss scaling (DeepSpeed ignores it too)");
    b.finish();
  }
  if (const json* v = top.get("fp16")) {
    Block b(*v, "fp16", path_, notes_);
    if (const json* e = b.get("enabled")) fp16 = b.boolean("enabled", *e);
    map_key(b, "loss_scale", "loss-scale", Kind::number);
    map_key(b, "initial_scale_power", "initial-scale-power", Kind::integer);
    map_key(b, "loss_scale_window", "loss-scale-window", Kind::integer);
    map_key(b, "hysteresis", "hysteresis", Kind::integer);
    map_key(b, "min_loss_scale", "min-loss-scale", Kind::number);
    b.unsupported("consecutive_hysteresis", no, "Strata's hysteresis counts overflows in a row (DeepSpeed's default)");
    // auto_cast casts a model's floating-point inputs to fp16; a language model's inputs are
    // token ids, and Strata computes in the precision it trains in either way.
    b.accept("auto_cast", "the inputs are token ids; Strata computes in --precision either way");
    b.finish();
  }
  STRATA_CHECK(!(bf16 && fp16), "config '" + path_ + "': bf16 and fp16 are both enabled", "enable one of them");
  if (bf16) set("precision", "bf16", path_ + ": bf16.enabled");
  if (fp16) set("precision", "f16", path_ + ": fp16.enabled");
}

// optimizer: Adam/AdamW, decoupled weight decay.
void Translation::optimizer(Block& top) {
  if (const json* v = top.get("optimizer")) {
    Block b(*v, "optimizer", path_, notes_);
    std::string type = "AdamW";
    if (const json* t = b.get("type")) type = b.string("type", *t);
    std::string lower = type;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    STRATA_CHECK(lower == "adam" || lower == "adamw", b.where("type") + " = \"" + type + "\" is not implemented",
                 "Strata's optimizer is AdamW (type Adam or AdamW)");
    if (const json* p = b.get("params")) {
      Block q(*p, "optimizer.params", path_, notes_);
      map_key(q, "lr", "lr", Kind::number);
      if (const json* e = q.get("betas")) {
        STRATA_CHECK(e->is_array() && e->size() == 2 && (*e)[0].is_number() && (*e)[1].is_number(),
                     q.where("betas") + " = " + e->dump() + " is not [beta1, beta2]", "e.g. [0.9, 0.999]");
        set("beta1", shortest_text((*e)[0].get<double>()), q.from("betas"));
        set("beta2", shortest_text((*e)[1].get<double>()), q.from("betas"));
      }
      map_key(q, "eps", "eps", Kind::number);
      map_key(q, "weight_decay", "weight-decay", Kind::number);
      // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (L2 regularisation).
      q.unsupported("adam_w_mode", yes, "Strata's Adam decouples weight decay (AdamW)");
      q.accept("torch_adam", "the same AdamW arithmetic in Strata's own kernel");
      q.unsupported("amsgrad", no, "Strata's AdamW has no AMSGrad variant");
      if (const json* e = q.get("bias_correction"))
        set("adam-bias-correction", q.boolean("bias_correction", *e) ? "true" : "false", q.from("bias_correction"));
      q.finish();
    }
    b.finish();
  }
}

// scheduler: linear warmup from 0, then constant, linear or cosine decay.
void Translation::scheduler(Block& top) {
  if (const json* v = top.get("scheduler")) {
    Block b(*v, "scheduler", path_, notes_);
    const json* t = b.get("type");
    STRATA_CHECK(t, b.where("type") + " is missing", "use WarmupLR, WarmupDecayLR or WarmupCosineLR");
    const std::string type = b.string("type", *t);
    STRATA_CHECK(type == "WarmupLR" || type == "WarmupDecayLR" || type == "WarmupCosineLR",
                 b.where("type") + " = \"" + type + "\" is not implemented",
                 "Strata schedules WarmupLR, WarmupDecayLR and WarmupCosineLR");
    set("lr-decay", type == "WarmupLR" ? "constant" : type == "WarmupDecayLR" ? "linear" : "cosine", b.from("type"));
    if (const json* p = b.get("params")) {
      Block q(*p, "scheduler.params", path_, notes_);
      map_key(q, "warmup_num_steps", "warmup", Kind::integer);
      // Absent: DeepSpeed's default "log" (add_deepspeed_defaults).
      map_key(q, "warmup_type", "warmup-type", Kind::text);
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
}

// zero_optimization and its offload blocks. `true`/`false`: DeepSpeed's old form, stage 1 or 0
// (read_zero_config_deprecated).
void Translation::zero_optimization(Block& top) {
  if (const json* v = top.get("zero_optimization"); v && v->is_boolean()) {
    set("zero-stage", v->get<bool>() ? "1" : "0", top.from("zero_optimization") + " (DeepSpeed's old form)");
  } else if (v) {
    Block b(*v, "zero_optimization", path_, notes_);
    map_key(b, "stage", "zero-stage", Kind::integer);
    if (const json* e = b.get("overlap_comm"))
      set("overlap-comm", b.boolean("overlap_comm", *e) ? "true" : "false", b.from("overlap_comm"));
    // How DeepSpeed moves and lays out_ gradients and parameters: speed and memory, the same result.
    b.accept("contiguous_gradients", "Strata's gradients are always contiguous per bucket (memory only)");
    b.accept("reduce_scatter", "Strata reduce-scatters at stages 1-3 (all-reduce gives the same sums)");
    b.accept("allgather_partitions", "Strata all-gathers partitions (the same parameters either way)");
    b.accept("round_robin_gradients", "an offload speed-up in DeepSpeed; Strata's partitions give the same result");
    // How DeepSpeed reads its own checkpoints; Strata's resume restores the master exactly.
    b.accept("load_from_fp32_weights",
             "Strata resumes from its master (f32, or bf16 with --master-dtype bf16), bit for bit");
    b.accept("elastic_checkpoint", "Strata's checkpoints reshard onto any world size");
    for (const char* k : {"stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
                          "stage3_gather_fp16_weights_on_model_save"})
      b.accept(k, "Strata's checkpoints keep the master in its dtype; `strata export` writes the 16-bit model");
    b.unsupported("zero_quantized_weights", no, "Strata gathers weights unquantised");
    b.unsupported("zero_quantized_gradients", no, "Strata reduces gradients unquantised");
    // A bucket size of 0 is DeepSpeed's "one parameter per bucket": a speed setting, so
    // Strata's own size stands in.
    for (const auto& [key, option] : {std::pair{"reduce_bucket_size", "reduce-bucket-size"},
                                      std::pair{"allgather_bucket_size", "allgather-bucket-size"}})
      if (const json* e = b.get(key)) {
        if (b.integer(key, *e) == 0)
          b.note(key,
                 "0 (one parameter per bucket in DeepSpeed) keeps Strata's --" + std::string(option) + " (speed only)");
        else
          set(option, std::to_string(b.integer(key, *e)), b.from(key));
      }
    map_key(b, "stage3_prefetch_bucket_size", "prefetch-bucket-size", Kind::integer);
    map_key(b, "stage3_param_persistence_threshold", "param-persistence-threshold", Kind::integer);
    map_key(b, "stage3_max_live_parameters", "max-live-params", Kind::integer);
    map_key(b, "max_live_parameters", "max-live-params", Kind::integer);  // DeepSpeed's field name
    if (const json* e = b.get("sub_group_size")) {
      if (b.integer("sub_group_size", *e) == 0)  // DeepSpeed: one group per parameter tensor
        b.note("sub_group_size", "0 keeps Strata's --sub-group-size (it only bounds the optimizer's working set)");
      else
        set("sub-group-size", std::to_string(b.integer("sub_group_size", *e)), b.from("sub_group_size"));
    }
    map_key(b, "zero_hpz_partition_size", "hpz-partition-size", Kind::integer);
    for (const char* k : {"stage3_max_reuse_distance", "max_reuse_distance"})
      b.accept(k, "Strata releases a gathered unit after its use (its prefetch keeps the next ones)");
    // The old offload switches.
    if (const json* e = b.get("cpu_offload"))
      if (b.boolean("cpu_offload", *e)) set("offload-optimizer", "cpu", b.from("cpu_offload"));
    if (const json* e = b.get("cpu_offload_params"))
      if (b.boolean("cpu_offload_params", *e)) set("offload-param", "cpu", b.from("cpu_offload_params"));
    b.accept("cpu_offload_use_pin_memory", "Strata's staging buffers are always page-locked");
    std::string pin_from;
    for (const char* block : {"offload_optimizer", "offload_param"}) {
      const json* o = b.get(block);
      if (!o) continue;
      Block q(*o, std::string("zero_optimization.") + block, path_, notes_);
      const std::string option = std::string(block) == "offload_optimizer" ? "offload-optimizer" : "offload-param";
      if (const json* e = q.get("device")) {
        const std::string d = q.string("device", *e);
        STRATA_CHECK(d == "none" || d == "cpu" || d == "nvme", q.where("device") + " = \"" + d + "\"",
                     "use none, cpu or nvme");
        set(option, d, q.from("device"));
      }
      map_key(q, "nvme_path", "nvme-path", Kind::text);
      q.accept("pin_memory", "Strata's staging buffers are always page-locked");
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
}

// aio: the NVMe swapping's requests.
void Translation::aio(Block& top) {
  if (const json* v = top.get("aio")) {
    Block b(*v, "aio", path_, notes_);
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
}

// activation_checkpointing: present means on.
void Translation::activation_checkpointing(Block& top) {
  if (const json* v = top.get("activation_checkpointing")) {
    Block b(*v, "activation_checkpointing", path_, notes_);
    set("activation-checkpointing", "true", top.from("activation_checkpointing") + " (present)");
    if (const json* e = b.get("cpu_checkpointing"))
      if (b.boolean("cpu_checkpointing", *e)) set("offload-activations", "cpu", b.from("cpu_checkpointing"));
    // DeepSpeed splits checkpoints across model-parallel ranks; Strata has none to split over.
    b.accept("partition_activations", "no model parallelism: each rank keeps its checkpoints whole");
    b.unsupported(
        "contiguous_memory_optimization", [](const json&) { return true; }, "");
    b.unsupported(
        "number_checkpoints", [](const json& e) { return e.is_null(); }, "Strata checkpoints every layer");
    b.unsupported("synchronize_checkpoint_boundary", no, "Strata needs no synchronisation there");
    b.unsupported("profile", no, "the step timeline is in metrics.jsonl");
    b.finish();
  }
}

// lora: Strata's own block (DeepSpeed has none), with PEFT's LoraConfig names: r,
// lora_alpha, lora_dropout, target_modules (a list or one string), init_lora_weights
// (true or "gaussian").
void Translation::lora(Block& top) {
  const json* v = top.get("lora");
  if (!v) return;
  Block b(*v, "lora", path_, notes_);
  map_key(b, "r", "lora-rank", Kind::integer);
  map_key(b, "lora_alpha", "lora-alpha", Kind::number);
  map_key(b, "lora_dropout", "lora-dropout", Kind::number);
  if (const json* e = b.get("target_modules")) {
    std::string names;
    if (e->is_array()) {
      for (const json& n : *e) names += (names.empty() ? "" : ",") + b.string("target_modules", n);
    } else {
      names = b.string("target_modules", *e);
    }
    set("lora-targets", names, b.from("target_modules"));
  }
  if (const json* e = b.get("init_lora_weights")) {
    STRATA_CHECK(yes(*e) || *e == "gaussian",
                 "config '" + path_ + "': " + b.from("init_lora_weights") + " = " + e->dump() + " is not supported",
                 "use true (PEFT's default) or \"gaussian\"");
    set("lora-init", yes(*e) ? "default" : "gaussian", b.from("init_lora_weights"));
  }
  b.finish();
}

// DeepSpeed applies offload_param at stage 3 only and ignores it below; at stage 3 the
// optimizer goes with the parameters it updates.
void Translation::stage3_offload() {
  const auto stage =
      std::find_if(out_.begin(), out_.end(), [](const ConfigSetting& s) { return s.option == "zero-stage"; });
  const auto param =
      std::find_if(out_.begin(), out_.end(), [](const ConfigSetting& s) { return s.option == "offload-param"; });
  if (param != out_.end() && param->value != "none" && (stage == out_.end() || stage->value != "3")) {
    notes_.lines.push_back(param->from + " = " + param->value +
                           ": ignored below stage 3, as DeepSpeed ignores it (parameters stay on the device)");
    out_.erase(param);
  } else if (param != out_.end() && param->value != "none") {
    // Strata's offloaded parameters are updated where they live, by the host optimizer, so
    // the optimizer goes with them: the same result, its states in host RAM too.
    const auto opt =
        std::find_if(out_.begin(), out_.end(), [](const ConfigSetting& s) { return s.option == "offload-optimizer"; });
    if (opt == out_.end() || opt->value == "none") {
      const std::string tier = param->value, from = param->from;
      if (opt != out_.end()) out_.erase(opt);
      out_.push_back({"offload-optimizer", tier, from + " (the optimizer goes with offloaded parameters)"});
      notes_.lines.push_back(from + " = " + tier + ": Strata offloads the optimizer with the parameters it updates " +
                             "(the same result; the optimizer's states move to host memory too)");
    }
  }
}

}  // namespace

std::vector<ConfigSetting> translate_ds_config(const std::string& path, int world, int64_t hidden,
                                               std::vector<std::string>* notes_out) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "cannot open config '" + path + "'", "check --config");
  std::stringstream ss;
  ss << f.rdbuf();
  return translate_ds_config_text(ss.str(), path, world, hidden, notes_out);
}

std::vector<ConfigSetting> translate_ds_config_text(const std::string& text, const std::string& path, int world,
                                                    int64_t hidden, std::vector<std::string>* notes_out) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for huge numbers
    throw_error("config '" + path + "' is not valid JSON: " + std::string(e.what()), "fix the file's syntax");
  }
  Translation t(path, world);
  Block top(j, "", path, t.notes());
  // In this order: a key's "did you mean" hint and a conflict's message follow it.
  t.batch(top);
  t.top_level(top);
  t.precision(top);
  t.optimizer(top);
  t.scheduler(top);
  t.zero_optimization(top);
  t.aio(top);
  t.activation_checkpointing(top);
  t.lora(top);
  top.finish();
  t.stage3_offload();
  std::vector<ConfigSetting>& out = t.settings();
  std::vector<std::string>& lines = t.notes().lines;
  std::set<std::string> auto_options;
  const SetOption set = [&](const std::string& option, const std::string& value, const std::string& from) {
    t.set(option, value, from);
  };
  resolve_autos(t.notes().autos, path, hidden, set, auto_options, lines);
  add_deepspeed_defaults(j, path, out, auto_options, lines);
  if (notes_out) *notes_out = std::move(lines);
  return out;
}

}  // namespace strata::cli
