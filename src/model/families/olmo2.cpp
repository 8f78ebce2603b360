// OLMo-2 (model_type olmo2): each sublayer's output normalised before the residual add
// (post_attention_layernorm, post_feedforward_layernorm; no input norm), and q and k each
// normalised over the whole projection before the rotation.
#include "model/families/decoder_family.h"

namespace strata {
namespace {

class Olmo2Family final : public DecoderFamily {
 public:
  std::string model_type() const override { return "olmo2"; }
  std::string display_name() const override { return "OLMo-2"; }
  std::string hf_architecture() const override { return "Olmo2ForCausalLM"; }
  void set_defaults(LlamaConfig& c) const override {
    c.norms = NormPlacement::post;
    c.qk_norm = c.qk_norm_whole = true;
  }
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override {
    if (all || c.o_bias) j["attention_bias"] = c.o_bias;
  }
  bool states_head_dim() const override { return false; }
};

}  // namespace

const ModelFamily& olmo2_family() {
  static const Olmo2Family f;
  return f;
}

}  // namespace strata
