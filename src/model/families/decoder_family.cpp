#include "model/families/decoder_family.h"

#include <algorithm>

#include "core/error.h"
#include "model/model_spec.h"

namespace strata {

void DecoderFamily::read_config(const std::string& text, const std::string& origin, ModelSpec& spec) const {
  spec.llama = LlamaConfig::read(text, origin, *this);
}

namespace {
nlohmann::ordered_json rope_scaling_json(const RopeSpec& r) {
  if (r.scaling == RopeScaling::none) return nullptr;
  if (r.scaling == RopeScaling::linear) return {{"rope_type", "linear"}, {"factor", shortest_decimal(r.factor)}};
  return {{"rope_type", "llama3"},
          {"factor", shortest_decimal(r.factor)},
          {"low_freq_factor", shortest_decimal(r.low_freq_factor)},
          {"high_freq_factor", shortest_decimal(r.high_freq_factor)},
          {"original_max_position_embeddings", r.original_max_position}};
}

// The keys beyond Llama 2's. `all`: every key the family's config.json has (the export);
// otherwise only those that differ from Llama 2 (the shape JSON).
void keys_beyond_llama2(const DecoderFamily& f, const LlamaConfig& c, nlohmann::ordered_json& j, bool all) {
  if ((all && f.states_head_dim()) || c.head_dim_key) j["head_dim"] = c.head_dim();
  if (all || c.rope.scaling != RopeScaling::none) j["rope_scaling"] = rope_scaling_json(c.rope);
  if (all || c.tied) j["tie_word_embeddings"] = c.tied;
  // Which layers slide, where some do (transformers derives the same from Qwen's
  // max_window_layers and Gemma's pattern; stated, every version reads one list).
  if (std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end()) {
    nlohmann::ordered_json types = nlohmann::ordered_json::array();
    for (bool s : c.sliding_layers) types.push_back(s ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  f.export_keys(c, j, all);
}
}  // namespace

std::string DecoderFamily::shape_json(const ModelSpec& spec) const {
  const LlamaConfig& c = spec.llama;
  nlohmann::ordered_json j = {{"arch", "llama"},
                              {"num_hidden_layers", c.n_layer},
                              {"num_attention_heads", c.n_head},
                              {"num_key_value_heads", c.n_kv_head},
                              {"hidden_size", c.n_embd},
                              {"intermediate_size", c.intermediate},
                              {"vocab_size", c.vocab_size},
                              {"padded_vocab_size", c.padded_vocab_size},
                              {"max_position_embeddings", c.max_seq_len},
                              {"rms_norm_eps", c.rms_eps},
                              {"rope_theta", c.rope.theta}};
  // What the later families add, only where present: the JSON of a Llama 2 shape (and so
  // its checkpoints' manifests) stays as it was.
  if (c.family != "llama") j["model_type"] = c.family;
  keys_beyond_llama2(*this, c, j, false);
  return j.dump();
}

std::string DecoderFamily::hf_config_json(const ModelSpec& spec, DType dtype) const {
  const LlamaConfig& c = spec.llama;
  nlohmann::ordered_json j = {{"architectures", {hf_architecture()}}, {"model_type", c.family}};
  export_activation(j);
  j.update(nlohmann::ordered_json{{"hidden_size", c.n_embd},
                                  {"intermediate_size", c.intermediate},
                                  {"num_hidden_layers", c.n_layer},
                                  {"num_attention_heads", c.n_head},
                                  {"num_key_value_heads", c.n_kv_head},
                                  {"max_position_embeddings", c.max_seq_len},
                                  {"rms_norm_eps", shortest_decimal(c.rms_eps)},
                                  {"rope_theta", shortest_decimal(c.rope.theta)},
                                  {"vocab_size", c.vocab_size},
                                  {"torch_dtype", hf_dtype_name(dtype)}});
  keys_beyond_llama2(*this, c, j, true);
  // Strata's own padding, when it is not the default (Hugging Face ignores the extra key).
  if (c.padded_vocab_size != (c.vocab_size + 63) / 64 * 64) j["padded_vocab_size"] = c.padded_vocab_size;
  return j.dump(2) + "\n";
}

int DecoderFamily::n_layer(const ModelSpec& spec) const { return spec.llama.n_layer; }
int DecoderFamily::n_embd(const ModelSpec& spec) const { return spec.llama.n_embd; }
int DecoderFamily::vocab_size(const ModelSpec& spec) const { return spec.llama.vocab_size; }
int DecoderFamily::padded_vocab_size(const ModelSpec& spec) const { return spec.llama.padded_vocab_size; }
int64_t DecoderFamily::num_params(const ModelSpec& spec) const { return spec.llama.num_params(); }
std::vector<ParamSpec> DecoderFamily::unit_layout(const ModelSpec& spec) const { return llama_unit_layout(spec.llama); }

std::vector<LinearShape> DecoderFamily::linears(const ModelSpec& spec) const {
  const LlamaConfig& l = spec.llama;
  const int L = l.n_layer;
  const int64_t C = l.n_embd, qkv = l.q_dim() + 2 * int64_t(l.n_kv_head) * l.head_dim();
  return {{C, qkv, L},
          {l.q_dim(), C, L},
          {C, 2 * int64_t(l.intermediate), L},
          {l.intermediate, C, L},
          {C, l.padded_vocab_size, 1}};
}

LayerWidths DecoderFamily::layer_widths(const ModelSpec& spec) const {
  const LlamaConfig& l = spec.llama;
  bool two_ropes = false;  // Gemma-3's sliding layers with a RoPE of their own
  for (int i = 0; i < l.n_layer; ++i) two_ropes = two_ropes || !(l.layer_rope(i) == l.rope);
  return {l.n_head, l.head_dim(), int64_t(l.n_head + 2 * l.n_kv_head) * l.head_dim(), 2 * int64_t(l.intermediate),
          two_ropes ? 2 : 1};
}

std::string DecoderFamily::hf_tensor(LlamaParam kind) const {
  switch (kind) {
    case LlamaParam::embed:
      return "model.embed_tokens.weight";
    case LlamaParam::norm:
      return "model.norm.weight";
    case LlamaParam::lm_head:
      return "lm_head.weight";
    case LlamaParam::attn_norm:
      return "input_layernorm.weight";
    case LlamaParam::wq:
      return "self_attn.q_proj.weight";
    case LlamaParam::wk:
      return "self_attn.k_proj.weight";
    case LlamaParam::wv:
      return "self_attn.v_proj.weight";
    case LlamaParam::wo:
      return "self_attn.o_proj.weight";
    case LlamaParam::bq:
      return "self_attn.q_proj.bias";
    case LlamaParam::bk:
      return "self_attn.k_proj.bias";
    case LlamaParam::bv:
      return "self_attn.v_proj.bias";
    case LlamaParam::bo:
      return "self_attn.o_proj.bias";
    case LlamaParam::q_norm:
      return "self_attn.q_norm.weight";
    case LlamaParam::k_norm:
      return "self_attn.k_norm.weight";
    case LlamaParam::mlp_norm:
      return "post_attention_layernorm.weight";
    case LlamaParam::post_attn_norm:
      return "post_attention_layernorm.weight";
    case LlamaParam::post_mlp_norm:
      return "post_feedforward_layernorm.weight";
    case LlamaParam::w_gate:
      return "mlp.gate_proj.weight";
    case LlamaParam::w_up:
      return "mlp.up_proj.weight";
    case LlamaParam::w_down:
      return "mlp.down_proj.weight";
    case LlamaParam::count:
      break;
  }
  throw_error("no Hugging Face name for Llama tensor kind " + std::to_string(int(kind)), "this is a bug");
}

HfName DecoderFamily::hf_name(const ModelSpec&, const ParamSpec& p) const {
  const LlamaParam kind = llama_kind(p);
  const bool outside_layers = kind == LlamaParam::embed || kind == LlamaParam::norm || kind == LlamaParam::lm_head;
  HfName n;
  n.name = outside_layers ? hf_tensor(kind) : "model.layers." + std::to_string(p.layer) + "." + hf_tensor(kind);
  n.vocab_rows = kind == LlamaParam::embed || kind == LlamaParam::lm_head;
  return n;
}

bool DecoderFamily::hf_ignorable(const ModelSpec& spec, const std::string& name) const {
  return name.ends_with("rotary_emb.inv_freq") || (spec.llama.tied && name == "lm_head.weight");
}

}  // namespace strata
