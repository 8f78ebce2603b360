// Llama 1, 2, 3, 3.1 and 3.2 (model_type llama): the decoder as transformers' LlamaForCausalLM.
#include "model/families/decoder_family.h"

namespace strata {
namespace {

class LlamaFamily final : public DecoderFamily {
 public:
  std::string model_type() const override { return "llama"; }
  std::string display_name() const override { return "Llama"; }
  std::string hf_architecture() const override { return "LlamaForCausalLM"; }
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override {
    if (all || c.o_bias) j["attention_bias"] = c.o_bias;
    if (all) j["mlp_bias"] = false;
  }
};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily f;
  return f;
}

}  // namespace strata
