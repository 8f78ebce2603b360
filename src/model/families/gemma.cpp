#include "model/families/gemma.h"

#include <cmath>

namespace strata {

void GemmaFamily::set_defaults(LlamaConfig& c) const {
  c.norms = NormPlacement::sandwich;
  c.norm_offset = 1.0f;
  c.mlp_act = GatedAct::gelu_tanh;
  c.embed_scale = true;
  c.tied = true;
  c.query_pre_attn_scalar = 256;  // transformers' default
}

bool GemmaFamily::read_key(const std::string& key, const nlohmann::json& v, LlamaConfig& c,
                           const ConfigValues& r) const {
  if (key == "hidden_activation" || key == "hidden_act")
    r.refuse_unless(v == "gelu_pytorch_tanh", key, v, "Gemma's GeGLU MLP (gelu_pytorch_tanh)");
  else if (key == "query_pre_attn_scalar")
    c.query_pre_attn_scalar = r.positive_int(v, key);
  else if (key == "attn_logit_softcapping")
    c.attn_softcap = v.is_null() ? 0.0f : float(r.positive_number(v, key));
  else if (key == "final_logit_softcapping")
    c.final_softcap = v.is_null() ? 0.0f : float(r.positive_number(v, key));
  else if (key == "sliding_window_size") {  // older Gemma-2 configs' second name for it
    if (!c.sliding_window_key) c.sliding_window_key = r.positive_int_or_null(v, key);
  } else if (key == "sliding_window_pattern" || key == "_sliding_window_pattern")
    c.sliding_pattern = r.positive_int(v, key);
  else if (key == "use_bidirectional_attention")
    r.refuse_unless(v.is_null() || v == false, key, v, "causal attention (use_bidirectional_attention false)");
  else if (key == "cache_implementation")
    ;  // generation's cache: nothing to train
  else
    return false;
  return true;
}

std::string GemmaFamily::own_keys() const {
  return ", hidden_activation, query_pre_attn_scalar, attn_logit_softcapping, final_logit_softcapping, "
         "sliding_window_pattern";
}

void GemmaFamily::finish_config(LlamaConfig& c) const {
  c.sliding_window = c.sliding_window_key;
  if (c.sliding_layers.empty() && c.sliding_window) {  // every pattern-th layer full, the others slide
    const int p = c.sliding_pattern ? c.sliding_pattern : default_sliding_pattern();
    for (int l = 0; l < c.n_layer; ++l) c.sliding_layers.push_back((l + 1) % p != 0);
  }
  c.query_scale = float(1.0 / std::sqrt(double(c.query_pre_attn_scalar)));  // transformers' ** -0.5
}

void GemmaFamily::export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool) const {
  // Every key, in the shape JSON too: Gemma's defaults differ from Llama's.
  j["head_dim"] = c.head_dim();
  j["tie_word_embeddings"] = c.tied;
  j["attention_bias"] = c.o_bias;
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
  j["sliding_window"] = c.sliding_window_key ? nlohmann::ordered_json(c.sliding_window_key) : nullptr;
  j["attn_logit_softcapping"] = c.attn_softcap > 0 ? nlohmann::ordered_json(shortest_decimal(c.attn_softcap)) : nullptr;
  j["final_logit_softcapping"] =
      c.final_softcap > 0 ? nlohmann::ordered_json(shortest_decimal(c.final_softcap)) : nullptr;
}

std::string GemmaFamily::hf_tensor(LlamaParam kind) const {
  return kind == LlamaParam::mlp_norm ? "pre_feedforward_layernorm.weight" : DecoderFamily::hf_tensor(kind);
}

}  // namespace strata
