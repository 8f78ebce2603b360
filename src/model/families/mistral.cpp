// Mistral (model_type mistral): Llama's decoder whose sliding_window, when stated, is in force.
#include "model/families/decoder_family.h"

namespace strata {
namespace {

class MistralFamily final : public DecoderFamily {
 public:
  std::string model_type() const override { return "mistral"; }
  std::string display_name() const override { return "Mistral"; }
  std::string hf_architecture() const override { return "MistralForCausalLM"; }
  void finish_config(LlamaConfig& c) const override { c.sliding_window = c.sliding_window_key; }
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override {
    if (all || c.o_bias) j["attention_bias"] = c.o_bias;
    j["sliding_window"] = c.sliding_window_key ? nlohmann::ordered_json(c.sliding_window_key) : nullptr;
  }
};

}  // namespace

const ModelFamily& mistral_family() {
  static const MistralFamily f;
  return f;
}

}  // namespace strata
