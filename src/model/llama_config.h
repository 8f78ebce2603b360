// The decoder's shape and options (RMSNorm, rotary positions, SwiGLU, grouped-query
// attention), read from a Hugging Face config.json of a decoder family (model/families/) or
// Strata's own JSON ("arch": "llama" with the same key names). The keys every decoder family
// shares are read here; each family reads its own and sets what it implies (its biases, its
// q/k norms) through its DecoderFamily hooks. What the families add to Llama 2 is carried
// here: rope_scaling (linear, llama3), tied embeddings, q/k/v (and o) biases, per-head q/k
// RMSNorm, a head_dim that is not hidden/heads, and a sliding window.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "backend/op_specs.h"

namespace strata {

class DecoderFamily;

// Typed reads of config.json values, each failure an Error naming the key and the file.
struct ConfigValues {
  std::string origin;
  int positive_int(const nlohmann::json& v, const std::string& key) const;
  int positive_int_or_null(const nlohmann::json& v, const std::string& key) const;  // null: 0
  double positive_number(const nlohmann::json& v, const std::string& key) const;
  bool boolean(const nlohmann::json& v, const std::string& key) const;
  // An Error unless `ok`: the key's value is not what Strata computes; `what` says what it supports.
  void refuse_unless(bool ok, const std::string& key, const nlohmann::json& v, const std::string& what) const;
};

// Where a layer's RMSNorms sit around its two sublayers (attention, MLP).
enum class NormPlacement {
  pre,       // before each sublayer (Llama): x + f(norm(x))
  post,      // after each sublayer's output (OLMo-2): x + norm(f(x))
  sandwich,  // before and after (Gemma): x + norm(f(norm(x)))
};

// Reads a RoPE object: transformers 4's rope_scaling (`with_theta` false) or transformers 5's
// rope_parameters, into rope (and a partial_rotary_factor found there into *partial_rotary).
void read_rope(const nlohmann::json& v, const std::string& key, bool with_theta, RopeSpec& rope, float* partial_rotary,
               const std::string& origin);

struct LlamaConfig {
  std::string family = "llama";  // model_type: a registered decoder family
  int n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0, intermediate = 0;
  int vocab_size = 0, padded_vocab_size = 0, max_seq_len = 0;
  int head_dim_key = 0;  // config.json's head_dim; 0: hidden_size / num_attention_heads
  float rms_eps = 1e-5f;
  RopeSpec rope;               // rope_theta and rope_scaling
  bool tied = false;           // tie_word_embeddings: the head is the embedding
  bool qkv_bias = false;       // q/k/v projections with biases (Qwen2; attention_bias)
  bool o_bias = false;         // the output projection too (attention_bias)
  bool qk_norm = false;        // RMSNorm on q and k before the rotation (Qwen3, OLMo-2, Gemma-3)
  bool qk_norm_whole = false;  // over the whole projection (OLMo-2), not per head (Qwen3)
  NormPlacement norms = NormPlacement::pre;
  float norm_offset = 0.0f;           // every RMSNorm scales by (norm_offset + w): Gemma's 1 + w
  GatedAct mlp_act = GatedAct::silu;  // SwiGLU; GeGLU (Gemma's gelu_pytorch_tanh)
  bool embed_scale = false;           // the embedding times sqrt(hidden_size), rounded to the compute dtype (Gemma)
  float query_scale = 0.0f;    // the attention's score scale (Gemma: query_pre_attn_scalar^-1/2); 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;   // attention scores soft-capped (Gemma-2); 0: none
  float final_softcap = 0.0f;  // the logits soft-capped (Gemma-2); 0: none
  RopeSpec local_rope;         // the RoPE of the sliding layers, where it is their own (Gemma-3)
  bool local_rope_own = false;
  float partial_rotary = 1.0f;       // partial_rotary_factor (Phi-3): rope.rotary_dim = int(head_dim · it)
  int sliding_window = 0;            // a window that is in force (Mistral, Qwen with use_sliding_window); 0: none
  std::vector<bool> sliding_layers;  // the layers it applies to (layer_types); empty: every layer
  bool use_sliding_window = false;   // Qwen's switch, kept for the export
  int sliding_window_key = 0;        // the window as the config states it, in force or not (export)
  int max_window_layers = 0;         // Qwen's, kept for the export
  int original_max_position = 0;     // Phi-3's original_max_position_embeddings (longrope's; kept for the export)
  int query_pre_attn_scalar = 0;     // Gemma's (query_scale is its ^-1/2), kept for the export
  int sliding_pattern = 0;           // Gemma's sliding_window_pattern: every such layer is full, the others slide

  // Keys as Hugging Face names them; a key that would change the computation in a way
  // Strata does not compute (another activation, mlp_bias, dynamic or yarn rope scaling,
  // attention dropout) is refused, bookkeeping keys are ignored, anything else is an error
  // naming it. The family is the text's model_type (Llama's without one).
  static LlamaConfig from_json_text(const std::string& text, const std::string& origin);
  static LlamaConfig read(const std::string& text, const std::string& origin, const DecoderFamily& family);
  int head_dim() const { return head_dim_key ? head_dim_key : n_embd / n_head; }
  int64_t q_dim() const { return int64_t(n_head) * head_dim(); }  // the attention's width
  int64_t num_params() const;
  void validate(const std::string& origin) const;
  // The sliding window of layer l's attention; 0: the whole causal prefix.
  int layer_window(int l) const { return sliding_layers.empty() || sliding_layers[size_t(l)] ? sliding_window : 0; }
  // Layer l's RoPE: the sliding layers' own where the family has one.
  const RopeSpec& layer_rope(int l) const {
    return local_rope_own && !sliding_layers.empty() && sliding_layers[size_t(l)] ? local_rope : rope;
  }
  AttentionSpec layer_attention(int l) const { return {layer_window(l), query_scale, attn_softcap}; }
  QkNormSpec qk_norm_spec() const { return {qk_norm_whole, norm_offset}; }
};

}  // namespace strata
