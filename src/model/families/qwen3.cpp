// Qwen3 (model_type qwen3): Qwen2's keys with an RMSNorm on each q and k head before the
// rotation, biases only with attention_bias, and head_dim stated.
#include "model/families/qwen2.h"

namespace strata {
namespace {

class Qwen3Family final : public Qwen2Family {
 public:
  std::string model_type() const override { return "qwen3"; }
  std::string display_name() const override { return "Qwen3"; }
  std::string hf_architecture() const override { return "Qwen3ForCausalLM"; }
  void set_defaults(LlamaConfig& c) const override { c.qk_norm = true; }
  bool read_key(const std::string& key, const nlohmann::json& v, LlamaConfig& c, const ConfigValues& r) const override {
    return key != "attention_bias" && Qwen2Family::read_key(key, v, c, r);
  }
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override {
    if (all || c.o_bias) j["attention_bias"] = c.o_bias;
    Qwen2Family::export_keys(c, j, all);
  }
  bool states_head_dim() const override { return true; }
};

}  // namespace

const ModelFamily& qwen3_family() {
  static const Qwen3Family f;
  return f;
}

}  // namespace strata
