#include "cli/ds_config_defaults.h"

#include <algorithm>

namespace strata::cli {

namespace {

// What the HF Trainer puts where a config says "auto" (transformers' integrations/deepspeed.py,
// HfTrainerDeepSpeedConfig.trainer_config_process): the Trainer's own argument, which is the
// Strata option named here.
struct AutoRule {
  const char* path;
  const char* options;  // the Strata options it stands for, comma-separated ("" for none)
  const char* rule;
};
constexpr AutoRule kAutoRules[] = {
    {"train_micro_batch_size_per_gpu", "micro-batch", "--micro-batch (per_device_train_batch_size)"},
    {"gradient_accumulation_steps", "grad-accum", "--grad-accum (gradient_accumulation_steps)"},
    {"train_batch_size", "", "--micro-batch × --grad-accum × ranks"},
    {"gradient_clipping", "grad-clip", "--grad-clip (max_grad_norm)"},
    {"optimizer.params.lr", "lr", "--lr (learning_rate)"},
    {"optimizer.params.betas", "beta1,beta2", "--beta1, --beta2 (adam_beta1, adam_beta2)"},
    {"optimizer.params.eps", "eps", "--eps (adam_epsilon)"},
    {"optimizer.params.weight_decay", "weight-decay", "--weight-decay (weight_decay)"},
    {"scheduler.params.warmup_min_lr", "", "0"},
    {"scheduler.params.warmup_max_lr", "lr", "--lr (learning_rate)"},
    {"scheduler.params.warmup_num_steps", "warmup", "--warmup (warmup_steps)"},
    {"scheduler.params.total_num_steps", "steps", "--steps (max_steps)"},
    {"fp16.enabled", "precision", "--precision (fp16)"},
    {"bf16.enabled", "precision", "--precision (bf16)"},
    {"bfloat16.enabled", "precision", "--precision (bf16)"},
};

void split_into(const std::string& list, std::set<std::string>& out) {
  for (size_t at = 0; at < list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.insert(list.substr(at, comma - at));
    at = comma + 1;
  }
}

}  // namespace

void resolve_autos(const std::vector<std::string>& autos, const std::string& file, int64_t hidden, const SetOption& set,
                   std::set<std::string>& options, std::vector<std::string>& notes) {
  for (const std::string& path : autos) {
    const std::string from = file + ": " + path + " = \"auto\"";
    // From the model, as the Trainer does: hidden², 0.9·hidden², 10·hidden.
    const struct {
      const char* path;
      const char* option;
      double per_hidden_sq, per_hidden;
    } model_rules[] = {
        {"zero_optimization.reduce_bucket_size", "reduce-bucket-size", 1.0, 0.0},
        {"zero_optimization.stage3_prefetch_bucket_size", "prefetch-bucket-size", 0.9, 0.0},
        {"zero_optimization.stage3_param_persistence_threshold", "param-persistence-threshold", 0.0, 10.0}};
    bool done = false;
    for (const auto& m : model_rules) {
      if (path != m.path) continue;
      done = true;
      options.insert(m.option);
      if (hidden <= 0) {
        notes.push_back(from + ": the model's hidden size is unknown here, so --" + m.option + " keeps its value");
        break;
      }
      const auto v = int64_t(m.per_hidden_sq * double(hidden) * double(hidden) + m.per_hidden * double(hidden));
      set(m.option, std::to_string(v),
          from + " → " +
              (m.per_hidden > 0         ? "10·hidden"
               : m.per_hidden_sq == 1.0 ? "hidden²"
                                        : "0.9·hidden²") +
              " (HF Trainer)");
      break;
    }
    if (done) continue;
    const auto it =
        std::find_if(std::begin(kAutoRules), std::end(kAutoRules), [&](const AutoRule& r) { return path == r.path; });
    if (it == std::end(kAutoRules)) {
      notes.push_back(from + ": left to Strata (the HF Trainer fills it from its own arguments)");
      continue;
    }
    split_into(it->options, options);
    notes.push_back(from + " → " + it->rule + ", as the HF Trainer fills it");
  }
}

void add_deepspeed_defaults(const nlohmann::json& config, const std::string& file, std::vector<ConfigSetting>& out,
                            const std::set<std::string>& auto_options, std::vector<std::string>& notes) {
  auto given = [&](const std::string& option) {
    return auto_options.count(option) ||
           std::any_of(out.begin(), out.end(), [&](const ConfigSetting& s) { return s.option == option; });
  };
  auto fallback = [&](const std::string& option, const std::string& value, const std::string& why) {
    if (!given(option)) out.push_back({option, value, "deepspeed default (" + why + ")", true});
  };
  const bool has = config.is_object();
  const auto block = [&](const char* key) { return has && config.contains(key) ? &config[key] : nullptr; };
  // The optimizer: DeepSpeed's Adam defaults for what its params leave out; with no optimizer
  // block the HF Trainer builds torch's AdamW from its own defaults.
  if (const nlohmann::json* o = block("optimizer")) {
    (void)o;
    fallback("lr", "0.001", "optimizer.params.lr");
    fallback("beta1", "0.9", "optimizer.params.betas");
    fallback("beta2", "0.999", "optimizer.params.betas");
    fallback("eps", "1e-08", "optimizer.params.eps");
    fallback("weight-decay", "0", "optimizer.params.weight_decay");
  } else {
    const std::string why = "no optimizer block: the HF Trainer's AdamW";
    fallback("lr", "5e-05", why + " learning_rate");
    fallback("beta1", "0.9", why + " adam_beta1");
    fallback("beta2", "0.999", why + " adam_beta2");
    fallback("eps", "1e-08", why + " adam_epsilon");
    fallback("weight-decay", "0", why + " weight_decay");
  }
  // No scheduler: DeepSpeed keeps the optimizer's lr. WarmupLR/WarmupDecayLR without params:
  // lr_schedules.py's defaults.
  if (const nlohmann::json* s = block("scheduler"); !s) {
    fallback("warmup", "0", "no scheduler: constant lr");
    fallback("lr-decay", "constant", "no scheduler: constant lr");
  } else {
    fallback("warmup", "1000", "scheduler.params.warmup_num_steps");
    fallback("warmup-type", "log", "scheduler.params.warmup_type");
  }
  fallback("grad-clip", "0", "gradient_clipping: none");
  fallback("precision", "f32", "fp16 and bf16 disabled");
  const nlohmann::json* f = block("fp16");
  if (f && f->is_object() && f->contains("enabled") && (*f)["enabled"] == true) {  // not "auto", not false
    fallback("loss-scale", "0", "fp16.loss_scale: dynamic");
    fallback("initial-scale-power", "16", "fp16.initial_scale_power");
    fallback("loss-scale-window", "1000", "fp16.loss_scale_window");
    fallback("hysteresis", "2", "fp16.hysteresis");
    fallback("min-loss-scale", "1", "fp16.min_loss_scale");
  }
  fallback("zero-stage", "0", "zero_optimization.stage");
  if (!given("reduce-bucket-size") || !given("allgather-bucket-size"))
    notes.push_back(file + ": bucket sizes, prefetch, persistence and live-parameter limits the file leaves out " +
                    "keep Strata's values (they change speed and memory, not the result)");
}

}  // namespace strata::cli
