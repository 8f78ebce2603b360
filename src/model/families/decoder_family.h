// What every decoder family (Llama and the families built like it) shares: the config reader
// (LlamaConfig::read), the shapes, the tensor names of transformers' Llama, the export
// config. A family overrides only the hooks where it differs, in its own file.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "model/llama_config.h"
#include "model/llama_params.h"
#include "model/model_family.h"

namespace strata {

class DecoderFamily : public ModelFamily {
 public:
  ModelClass model_class() const final { return ModelClass::decoder; }
  void read_config(const std::string& text, const std::string& origin, ModelSpec& spec) const override;
  std::string shape_json(const ModelSpec& spec) const final;
  std::string hf_config_json(const ModelSpec& spec, DType dtype) const final;
  int n_layer(const ModelSpec& spec) const final;
  int n_embd(const ModelSpec& spec) const final;
  int vocab_size(const ModelSpec& spec) const final;
  int padded_vocab_size(const ModelSpec& spec) const final;
  int64_t num_params(const ModelSpec& spec) const final;
  std::vector<ParamSpec> unit_layout(const ModelSpec& spec) const final;
  std::vector<LinearShape> linears(const ModelSpec& spec) const final;
  LayerWidths layer_widths(const ModelSpec& spec) const final;
  HfName hf_name(const ModelSpec& spec, const ParamSpec& p) const final;
  bool hf_ignorable(const ModelSpec& spec, const std::string& name) const final;

  // ---- the hooks ----
  // What the family implies before its config is read (Qwen2's q/k/v biases).
  virtual void set_defaults(LlamaConfig&) const {}
  // Reads one of the family's own keys (or one it reads differently); false: not its key.
  virtual bool read_key(const std::string& /*key*/, const nlohmann::json& /*v*/, LlamaConfig& /*c*/,
                        const ConfigValues& /*r*/) const {
    return false;
  }
  // ", key, key": the keys read_key takes, for the unknown-key message.
  virtual std::string own_keys() const { return ""; }
  // What follows from the keys once all are read (whether the sliding window is in force).
  virtual void finish_config(LlamaConfig&) const {}
  // The family's own config.json keys on export (`all`), or in the shape JSON only those
  // that differ from Llama 2's defaults.
  virtual void export_keys(const LlamaConfig&, nlohmann::ordered_json&, bool /*all*/) const {}
  // Whether the family's config.json states head_dim (Qwen2's has no such key).
  virtual bool states_head_dim() const { return true; }
  // The MLP's activation key on export ({"hidden_act": "silu"}).
  virtual void export_activation(nlohmann::ordered_json& j) const { j["hidden_act"] = "silu"; }
  // A tensor's name under "model.layers.<l>." (layer tensors) or in full (the others).
  virtual std::string hf_tensor(LlamaParam kind) const;
};

}  // namespace strata
