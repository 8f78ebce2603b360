#include "model/families/qwen2.h"

namespace strata {

bool Qwen2Family::read_key(const std::string& key, const nlohmann::json& v, LlamaConfig& c,
                           const ConfigValues& r) const {
  if (key == "use_sliding_window")
    c.use_sliding_window = r.boolean(v, key);
  else if (key == "max_window_layers")
    c.max_window_layers = r.positive_int_or_null(v, key);
  else if (key == "attention_bias")
    r.boolean(v, key);  // read and unused: Qwen2's q/k/v biases are always there, o's never
  else
    return false;
  return true;
}

void Qwen2Family::finish_config(LlamaConfig& c) const {
  if (!c.use_sliding_window) return;
  c.sliding_window = c.sliding_window_key;
  // Without layer_types, transformers slides the layers from max_window_layers (28 unstated) up.
  if (c.sliding_layers.empty())
    for (int l = 0; l < c.n_layer; ++l)
      c.sliding_layers.push_back(l >= (c.max_window_layers ? c.max_window_layers : 28));
}

void Qwen2Family::export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool) const {
  j["sliding_window"] = c.sliding_window_key ? nlohmann::ordered_json(c.sliding_window_key) : nullptr;
  j["use_sliding_window"] = c.use_sliding_window;
  if (c.max_window_layers) j["max_window_layers"] = c.max_window_layers;
}

const ModelFamily& qwen2_family() {
  static const Qwen2Family f;
  return f;
}

}  // namespace strata
