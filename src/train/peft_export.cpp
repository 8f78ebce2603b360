#include "train/peft_export.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text_file.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/model_family.h"
#include "train/lora_merge.h"
#include "train/trainer.h"

namespace strata {

std::string peft_key(const ModelSpec& spec, const LoraTarget& t, bool b) {
  return "base_model.model." + spec.family->hf_module_prefix() + t.hf_path + (b ? ".lora_B.weight" : ".lora_A.weight");
}

bool holds_adapters(const CheckpointManifest& m) { return m.run.contains("lora"); }

void export_peft(const CheckpointManifest& m, const FlatSource& adapters, const ModelSpec& spec, const std::string& dir,
                 DType dtype) {
  const nlohmann::json& l = m.run["lora"];
  const LoraConfig cfg = lora_config_of(m);
  const std::vector<LoraTarget> targets = lora_targets(spec, cfg);
  const std::vector<ParamSpec> layout = lora_layout(targets, cfg.rank, false);
  int64_t total = 0;
  for (const ParamSpec& p : layout) total += p.shape.numel();
  STRATA_CHECK(
      total == m.num_params,
      "the checkpoint holds " + std::to_string(m.num_params) + " adapter values, its adapters " + std::to_string(total),
      "export a checkpoint this version of strata wrote");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  STRATA_CHECK(!ec, "cannot create '" + dir + "': " + ec.message(), "check --out");
  std::vector<io::SafetensorsWriter::Entry> entries;
  std::vector<std::string> modules;
  for (size_t i = 0; i < layout.size(); ++i) {
    const LoraTarget& t = targets[i / 2];
    entries.push_back({peft_key(spec, t, i % 2 == 1), dtype, {layout[i].shape[0], layout[i].shape[1]}});
    if (std::find(modules.begin(), modules.end(), t.module) == modules.end()) modules.push_back(t.module);
  }
  io::SafetensorsWriter w(dir + "/adapter_model.safetensors", entries, {{"format", "pt"}});
  std::vector<float> buf;
  int64_t at = 0;
  for (const ParamSpec& p : layout) {
    buf.resize(size_t(p.shape.numel()));
    adapters.read(at, int64_t(buf.size()), buf.data());
    w.write_f32(buf, dtype);
    at += p.shape.numel();
  }
  w.finish();
  // GPT-2's Conv1D stores its weight [in, out]: PEFT's fan_in_fan_out.
  const std::vector<ParamSpec> base = spec.family->unit_layout(spec);
  const bool conv1d = !targets.empty() && spec.family->hf_name(spec, base[size_t(targets[0].first_spec)]).transposed;
  // PEFT's LoraConfig as save_pretrained writes it (its defaults for what Strata does not set).
  nlohmann::ordered_json c = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", m.run.value("model_dir", std::string())},
      {"r", cfg.rank},
      {"lora_alpha", cfg.alpha},
      {"lora_dropout", cfg.dropout},
      {"target_modules", modules},
      {"bias", "none"},
      {"fan_in_fan_out", conv1d},
      {"init_lora_weights", l.value("init", std::string("default")) == "gaussian" ? nlohmann::ordered_json("gaussian")
                                                                                  : nlohmann::ordered_json(true)},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"use_rslora", false},
      {"use_dora", false},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()}};
  write_text_file(dir + "/adapter_config.json", c.dump(2) + "\n");
}

}  // namespace strata
