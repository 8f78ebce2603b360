// Qwen2 and Qwen2.5 (model_type qwen2): Llama's decoder with q/k/v biases always (its
// attention_bias key is ignored, as transformers' Qwen2 ignores it) and a sliding window in
// force only with use_sliding_window. Qwen3 (qwen3.cpp) builds on it.
#pragma once
#include "model/families/decoder_family.h"

namespace strata {

class Qwen2Family : public DecoderFamily {
 public:
  std::string model_type() const override { return "qwen2"; }
  std::string display_name() const override { return "Qwen2"; }
  std::string hf_architecture() const override { return "Qwen2ForCausalLM"; }
  void set_defaults(LlamaConfig& c) const override { c.qkv_bias = true; }
  bool read_key(const std::string& key, const nlohmann::json& v, LlamaConfig& c, const ConfigValues& r) const override;
  std::string own_keys() const override { return ", use_sliding_window, max_window_layers"; }
  void finish_config(LlamaConfig& c) const override;
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override;
  bool states_head_dim() const override { return false; }
};

}  // namespace strata
