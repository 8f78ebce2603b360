// GPT-2 (model_type gpt2, and Strata's own GPT-2 JSON): learned positions, LayerNorm, GELU,
// Conv1D weights stored transposed in Hugging Face's checkpoints, a tied head.
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/gpt2_params.h"
#include "model/model_spec.h"

namespace strata {
namespace {

class Gpt2Family final : public ModelFamily {
 public:
  std::string model_type() const override { return "gpt2"; }
  std::string display_name() const override { return "GPT-2"; }
  std::string hf_architecture() const override { return "GPT2LMHeadModel"; }
  ModelClass model_class() const override { return ModelClass::gpt2; }
  std::vector<std::string> lora_default_targets() const override { return {"c_attn"}; }
  std::string hf_module_prefix() const override { return "transformer."; }

  void read_config(const std::string& text, const std::string& origin, ModelSpec& spec) const override {
    spec.gpt2 = GPT2Config::from_json_text(text, origin);
  }

  std::string shape_json(const ModelSpec& spec) const override {
    const GPT2Config& c = spec.gpt2;
    nlohmann::ordered_json j = {{"n_layer", c.n_layer},
                                {"n_head", c.n_head},
                                {"n_embd", c.n_embd},
                                {"vocab_size", c.vocab_size},
                                {"padded_vocab_size", c.padded_vocab_size},
                                {"n_positions", c.max_seq_len}};
    // Dropout only where a model has it: the shape JSON of the others stays as it was.
    for (const auto& [key, p] : {std::pair{"embd_pdrop", c.embd_pdrop}, std::pair{"attn_pdrop", c.attn_pdrop},
                                 std::pair{"resid_pdrop", c.resid_pdrop}})
      if (p > 0) j[key] = shortest_decimal(p);
    return j.dump();
  }

  std::string hf_config_json(const ModelSpec& spec, DType dtype) const override {
    const GPT2Config& c = spec.gpt2;
    nlohmann::ordered_json j = {{"architectures", {hf_architecture()}},
                                {"model_type", "gpt2"},
                                {"activation_function", "gelu_new"},
                                {"layer_norm_epsilon", 1e-5},
                                {"n_layer", c.n_layer},
                                {"n_head", c.n_head},
                                {"n_embd", c.n_embd},
                                {"n_positions", c.max_seq_len},
                                {"n_ctx", c.max_seq_len},
                                {"vocab_size", c.vocab_size},
                                {"tie_word_embeddings", true},
                                {"embd_pdrop", shortest_decimal(c.embd_pdrop)},
                                {"attn_pdrop", shortest_decimal(c.attn_pdrop)},
                                {"resid_pdrop", shortest_decimal(c.resid_pdrop)},
                                {"torch_dtype", hf_dtype_name(dtype)}};
    // Strata's own padding, when it is not the default (Hugging Face ignores the extra key).
    if (c.padded_vocab_size != (c.vocab_size + 63) / 64 * 64) j["padded_vocab_size"] = c.padded_vocab_size;
    return j.dump(2) + "\n";
  }

  int n_layer(const ModelSpec& s) const override { return s.gpt2.n_layer; }
  int n_embd(const ModelSpec& s) const override { return s.gpt2.n_embd; }
  int vocab_size(const ModelSpec& s) const override { return s.gpt2.vocab_size; }
  int padded_vocab_size(const ModelSpec& s) const override { return s.gpt2.padded_vocab_size; }
  int64_t num_params(const ModelSpec& s) const override { return s.gpt2.num_params(); }
  std::vector<ParamSpec> unit_layout(const ModelSpec& s) const override { return gpt2_unit_layout(s.gpt2); }

  std::vector<LinearShape> linears(const ModelSpec& s) const override {
    const int L = s.gpt2.n_layer;
    const int64_t C = s.gpt2.n_embd;
    return {{C, 3 * C, L}, {C, C, L}, {C, 4 * C, L}, {4 * C, C, L}, {C, s.gpt2.padded_vocab_size, 1}};
  }

  LayerWidths layer_widths(const ModelSpec& s) const override {
    const int64_t C = s.gpt2.n_embd;
    return {s.gpt2.n_head, int(C / s.gpt2.n_head), 3 * C, 4 * C, 0};  // fc is the widest; no RoPE
  }

  HfName hf_name(const ModelSpec&, const ParamSpec& s) const override {
    const std::string h = "h." + std::to_string(s.layer) + ".";
    switch (gpt2_kind(s)) {
      case GPT2Param::wte:
        return {"wte.weight", false, true};
      case GPT2Param::wpe:
        return {"wpe.weight"};
      case GPT2Param::ln1w:
        return {h + "ln_1.weight"};
      case GPT2Param::ln1b:
        return {h + "ln_1.bias"};
      case GPT2Param::qkvw:
        return {h + "attn.c_attn.weight", true};
      case GPT2Param::qkvb:
        return {h + "attn.c_attn.bias"};
      case GPT2Param::attprojw:
        return {h + "attn.c_proj.weight", true};
      case GPT2Param::attprojb:
        return {h + "attn.c_proj.bias"};
      case GPT2Param::ln2w:
        return {h + "ln_2.weight"};
      case GPT2Param::ln2b:
        return {h + "ln_2.bias"};
      case GPT2Param::fcw:
        return {h + "mlp.c_fc.weight", true};
      case GPT2Param::fcb:
        return {h + "mlp.c_fc.bias"};
      case GPT2Param::fcprojw:
        return {h + "mlp.c_proj.weight", true};
      case GPT2Param::fcprojb:
        return {h + "mlp.c_proj.bias"};
      case GPT2Param::lnfw:
        return {"ln_f.weight"};
      case GPT2Param::lnfb:
        return {"ln_f.bias"};
      case GPT2Param::count:
        break;
    }
    throw_error("no Hugging Face name for GPT-2 tensor kind " + std::to_string(s.kind), "this is a bug");
  }

  std::vector<std::string> hf_aliases(const std::string& name) const override { return {"transformer." + name}; }

  bool hf_ignorable(const ModelSpec&, const std::string& name) const override {
    // Causal-mask buffers older GPT-2 exports carry, the tied output head, and precomputed
    // rotary frequencies some converters add.
    return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
           name.ends_with("rotary_emb.inv_freq") || name == "lm_head.weight";
  }
};

}  // namespace

const ModelFamily& gpt2_family() {
  static const Gpt2Family f;
  return f;
}

}  // namespace strata
