// What Gemma-2 and Gemma-3 share: RMSNorms before and after both sublayers scaling by 1 + w
// (pre_feedforward_layernorm is the MLP's input norm), GeGLU (gelu_pytorch_tanh), the
// embedding times sqrt(hidden_size), scores scaled by query_pre_attn_scalar^-1/2, sliding
// and full layers (layer_types, or every sliding_window_pattern-th layer full), soft-caps
// where configured, tied embeddings by default.
#pragma once
#include "model/families/decoder_family.h"

namespace strata {

class GemmaFamily : public DecoderFamily {
 public:
  void set_defaults(LlamaConfig& c) const override;
  bool read_key(const std::string& key, const nlohmann::json& v, LlamaConfig& c, const ConfigValues& r) const override;
  std::string own_keys() const override;
  void finish_config(LlamaConfig& c) const override;
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override;
  void export_activation(nlohmann::ordered_json& j) const override { j["hidden_activation"] = "gelu_pytorch_tanh"; }
  std::string hf_tensor(LlamaParam kind) const override;

 protected:
  // Every pattern-th layer is full when the config names no layer types (Gemma-2: 2, Gemma-3: 6).
  virtual int default_sliding_pattern() const = 0;
};

// Gemma-3's language model, which also reads the text_config of Gemma3ForConditionalGeneration.
const ModelFamily& gemma3_text_family();

}  // namespace strata
