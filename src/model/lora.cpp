#include "model/lora.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "model/model_family.h"
#include "model/model_spec.h"

namespace strata {

namespace {

// "model.layers.3.self_attn.q_proj.weight" -> "model.layers.3.self_attn.q_proj"
std::string module_path(const std::string& tensor) {
  const size_t dot = tensor.rfind('.');
  return dot == std::string::npos ? tensor : tensor.substr(0, dot);
}
std::string module_name(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The linear layers of the decoder layers, grouped by Hugging Face module.
std::vector<LoraTarget> layer_linears(const ModelSpec& spec) {
  const ModelFamily& family = *spec.family;
  const std::vector<ParamSpec> layout = family.unit_layout(spec);
  const int L = family.n_layer(spec);
  std::vector<LoraTarget> all;
  for (int i = 0; i < int(layout.size()); ++i) {
    const ParamSpec& p = layout[size_t(i)];
    if (p.unit < 1 || p.unit > L || p.shape.rank != 2 || !p.weight_decay) continue;  // matrices of the layers
    const HfName hf = family.hf_name(spec, p);
    const std::string path = module_path(hf.name);
    const int64_t rows = p.shape[0], cols = p.shape[1];  // Strata's [out, in] (HF may store it transposed)
    if (!all.empty() && all.back().hf_path == path && all.back().first_spec + all.back().specs == i) {
      all.back().specs += 1, all.back().out += rows;  // one fused HF module over consecutive tensors
      continue;
    }
    all.push_back({module_name(path), path, p.layer, i, 1, cols, rows});
  }
  return all;
}

}  // namespace

std::vector<std::string> lora_module_names(const ModelSpec& spec) {
  std::vector<std::string> names;
  for (const LoraTarget& t : layer_linears(spec))
    if (std::find(names.begin(), names.end(), t.module) == names.end()) names.push_back(t.module);
  return names;
}

std::vector<LoraTarget> lora_targets(const ModelSpec& spec, const LoraConfig& lora) {
  std::vector<std::string> want = lora.targets;
  if (want.empty()) want = spec.family->lora_default_targets();
  const bool all_linear = want.size() == 1 && want[0] == "all-linear";
  const std::vector<LoraTarget> linears = layer_linears(spec);
  std::set<std::string> matched;
  std::vector<LoraTarget> out;
  for (const LoraTarget& t : linears)
    if (all_linear || std::find(want.begin(), want.end(), t.module) != want.end()) {
      out.push_back(t);
      matched.insert(t.module);
    }
  if (!all_linear)
    for (const std::string& w : want) {
      std::string names;
      for (const std::string& n : lora_module_names(spec)) names += (names.empty() ? "" : ", ") + n;
      STRATA_CHECK(matched.count(w), "--lora-targets: " + spec.family->display_name() + " has no module '" + w + "'",
                   "name its linear layers (" + names + "), or all-linear");
    }
  return out;
}

std::vector<ParamSpec> lora_layout(const std::vector<LoraTarget>& targets, int rank, bool decay) {
  std::vector<ParamSpec> specs;
  for (const LoraTarget& t : targets) {
    const std::string base = "h" + std::to_string(t.layer) + "." + t.module;
    specs.push_back({base + ".lora_A", Shape{rank, t.in}, decay, 0, t.layer, 1 + t.layer});
    specs.push_back({base + ".lora_B", Shape{t.out, rank}, decay, 1, t.layer, 1 + t.layer});
  }
  return specs;
}

}  // namespace strata
