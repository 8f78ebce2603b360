// Phi-3 and Phi-4 (model_type phi3): Llama's decoder with q|k|v and gate|up stored fused
// (qkv_proj, gate_up_proj: Strata's own adjacent tensors, so they map row for row), a
// partial_rotary_factor (Phi-4-mini), and a sliding_window in force when stated. longrope
// scaling (the 128k models) is refused with the reason (read_rope).
#include "model/families/decoder_family.h"

namespace strata {
namespace {

class Phi3Family final : public DecoderFamily {
 public:
  std::string model_type() const override { return "phi3"; }
  std::string display_name() const override { return "Phi-3"; }
  std::string hf_architecture() const override { return "Phi3ForCausalLM"; }
  std::vector<std::string> lora_default_targets() const override { return {"qkv_proj"}; }

  bool read_key(const std::string& key, const nlohmann::json& v, LlamaConfig& c, const ConfigValues& r) const override {
    if (key == "partial_rotary_factor")
      c.partial_rotary = float(r.positive_number(v, key));
    else if (key == "original_max_position_embeddings")
      c.original_max_position = r.positive_int_or_null(v, key);
    else if (key == "resid_pdrop" || key == "embd_pdrop")
      r.refuse_unless(v.is_number() && v.get<double>() == 0, key, v, "Phi-3 without dropout (" + key + " 0)");
    else if (key == "attention_bias")  // Phi-3's projections have none
      r.refuse_unless(v == false, key, v, "Phi-3 without attention biases");
    else
      return false;
    return true;
  }
  std::string own_keys() const override {
    return ", partial_rotary_factor, original_max_position_embeddings, resid_pdrop, embd_pdrop";
  }
  void finish_config(LlamaConfig& c) const override { c.sliding_window = c.sliding_window_key; }
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override {
    if (all || c.partial_rotary != 1.0f) j["partial_rotary_factor"] = shortest_decimal(c.partial_rotary);
    if (all) {
      j["original_max_position_embeddings"] = c.original_max_position ? c.original_max_position : c.max_seq_len;
      j["resid_pdrop"] = 0.0, j["embd_pdrop"] = 0.0;
    }
    if (all || c.sliding_window_key)
      j["sliding_window"] = c.sliding_window_key ? nlohmann::ordered_json(c.sliding_window_key) : nullptr;
  }
  bool states_head_dim() const override { return false; }

  std::string hf_tensor(LlamaParam kind) const override {
    switch (kind) {
      case LlamaParam::wq:
      case LlamaParam::wk:
      case LlamaParam::wv:
        return "self_attn.qkv_proj.weight";  // one name: the three stack into one HF tensor
      case LlamaParam::w_gate:
      case LlamaParam::w_up:
        return "mlp.gate_up_proj.weight";
      default:
        return DecoderFamily::hf_tensor(kind);
    }
  }
};

}  // namespace

const ModelFamily& phi3_family() {
  static const Phi3Family f;
  return f;
}

}  // namespace strata
