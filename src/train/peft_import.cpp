#include "train/peft_import.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/text_file.h"
#include "model/hf_weights.h"
#include "model/model_family.h"
#include "train/peft_export.h"
#include "train/train_options.h"

namespace strata {

void apply_peft_adapter_config(const std::string& dir, LoraOptions& o) {
  const std::string path = dir + "/adapter_config.json";
  STRATA_CHECK(std::filesystem::is_regular_file(path), "--lora-adapter " + dir + ": no adapter_config.json",
               "give the directory PEFT's save_pretrained (or strata export) wrote");
  nlohmann::json c;
  try {
    c = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw_error(path + ": " + e.what(), "give the adapter_config.json PEFT wrote");
  }
  const auto bad = [&](const std::string& what, const std::string& hint) { throw_error(path + ": " + what, hint); };
  if (c.value("peft_type", std::string()) != "LORA") bad("peft_type is not LORA", "give a LoRA adapter");
  if (c.value("use_dora", false)) bad("use_dora is true", "DoRA adapters are not trained by strata");
  if (c.value("use_rslora", false)) bad("use_rslora is true", "rsLoRA's scale (alpha / sqrt(r)) is not strata's");
  for (const char* k : {"rank_pattern", "alpha_pattern"})
    if (c.contains(k) && !c[k].is_null() && !c[k].empty())
      bad(std::string(k) + " is not empty", "one rank and one alpha for every module");
  if (c.value("bias", std::string("none")) != "none" || c.value("lora_bias", false))
    bad("bias is not \"none\" or lora_bias is true", "train adapters without biases");
  if (c.contains("modules_to_save") && !c["modules_to_save"].is_null() && !c["modules_to_save"].empty())
    bad("modules_to_save is not empty", "strata trains the adapters alone");
  if (c.contains("layers_to_transform") && !c["layers_to_transform"].is_null())
    bad("layers_to_transform is set", "adapters on every layer");
  std::string targets;
  const nlohmann::json& t = c.contains("target_modules") ? c["target_modules"] : nlohmann::json();
  if (t.is_string() && t.get<std::string>() == "all-linear") {
    targets = "all-linear";
  } else if (t.is_array()) {
    // Module names, or (PEFT's all-linear, saved) full module paths: a path names its last
    // component, and PeftAdapterWeights then finds every layer's adapter or says which is missing.
    std::set<std::string> names;
    for (const nlohmann::json& n : t) {
      if (!n.is_string()) bad("target_modules holds " + n.dump(), "a list of module names");
      const std::string s = n.get<std::string>();
      names.insert(s.substr(s.rfind('.') == std::string::npos ? 0 : s.rfind('.') + 1));
    }
    for (const std::string& n : names) targets += (targets.empty() ? "" : ",") + n;
  } else {
    bad("target_modules is " + t.dump(), "a list of module names (a regular expression is not supported)");
  }
  const int r = c.value("r", 0);
  if (r <= 0) bad("r is " + std::to_string(r), "a positive rank");
  STRATA_CHECK(
      o.lora_rank == 0 || o.lora_rank == r,
      "--lora-rank " + std::to_string(o.lora_rank) + " with --lora-adapter " + dir + " of r = " + std::to_string(r),
      "leave --lora-rank out: the adapter sets it");
  if (!o.lora_targets.empty()) {
    const auto set_of = [](const std::string& names) {
      LoraOptions parsed;
      parsed.lora_targets = names;
      const std::vector<std::string> t = parsed.lora_config().targets;
      return std::set<std::string>(t.begin(), t.end());
    };
    STRATA_CHECK(set_of(o.lora_targets) == set_of(targets),
                 "--lora-targets " + o.lora_targets + " with --lora-adapter " + dir + " on " + targets,
                 "leave --lora-targets out: the adapter sets them");
  }
  o.lora_rank = r;
  o.lora_alpha = c.value("lora_alpha", 8.0);
  o.lora_dropout = c.value("lora_dropout", 0.0);
  o.lora_targets = targets;
}

PeftAdapterWeights::PeftAdapterWeights(const std::string& dir, const ModelSpec& spec,
                                       const std::vector<LoraTarget>& targets, int rank)
    : file_(std::make_unique<io::SafetensorsFile>(dir + "/adapter_model.safetensors")) {
  std::set<std::string> used;
  int64_t at = 0;
  for (const ParamSpec& s : lora_layout(targets, rank, true)) {
    const LoraTarget& t = targets[pieces_.size() / 2];
    const std::string key = peft_key(spec, t, pieces_.size() % 2 == 1);
    const io::SafeTensor* tensor = file_->header().find(key);
    STRATA_CHECK(tensor, file_->path() + " has no " + key,
                 "the adapter must be PEFT's for this model, with the targets its adapter_config.json names");
    const std::vector<int64_t> want{s.shape[0], s.shape[1]};
    STRATA_CHECK(tensor->readable && tensor->shape == want,
                 file_->path() + ": " + key + " is " + tensor->dtype_name + " " + shape_text(tensor->shape) +
                     ", the model's adapter is F32/BF16/F16 [" + std::to_string(s.shape[0]) + ", " +
                     std::to_string(s.shape[1]) + "]",
                 "the adapter must be PEFT's for this model and its r");
    pieces_.push_back({at, s.shape.numel(), tensor});
    used.insert(key);
    at += s.shape.numel();
  }
  for (const io::SafeTensor& tensor : file_->header().tensors)
    STRATA_CHECK(used.count(tensor.name), file_->path() + " holds " + tensor.name + ", which no adapter of this run is",
                 "the adapter must be PEFT's for this model, with the targets its adapter_config.json names");
}

void PeftAdapterWeights::read(int64_t flat_begin, int64_t count, float* out) const {
  const int64_t end = flat_begin + count;
  for (const Piece& p : pieces_) {
    const int64_t a = std::max(flat_begin, p.flat_begin), b = std::min(end, p.flat_begin + p.count);
    if (a < b) file_->read_f32(*p.tensor, a - p.flat_begin, std::span<float>(out + (a - flat_begin), size_t(b - a)));
  }
}

}  // namespace strata
