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

struct LlamaConfig {
  std::string family = "llama";  // model_type: a registered decoder family
  int n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0, intermediate = 0;
  int vocab_size = 0, padded_vocab_size = 0, max_seq_len = 0;
  int head_dim_key = 0;  // config.json's head_dim; 0: hidden_size / num_attention_heads
  float rms_eps = 1e-5f;
  RopeSpec rope;                    // rope_theta and rope_scaling
  bool tied = false;                // tie_word_embeddings: the head is the embedding
  bool qkv_bias = false;            // q/k/v projections with biases (Qwen2; attention_bias)
  bool o_bias = false;              // the output projection too (attention_bias)
  bool qk_norm = false;             // Qwen3: RMSNorm on each q and k head before the rotation
  int sliding_window = 0;           // a window that is in force (Mistral, Qwen with use_sliding_window); 0: none
  std::vector<bool> sliding_layers; // the layers it applies to (layer_types); empty: every layer
  bool use_sliding_window = false;  // Qwen's switch, kept for the export
  int sliding_window_key = 0;       // the window as the config states it, in force or not (export)
  int max_window_layers = 0;        // Qwen's, kept for the export

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
  int layer_window(int l) const {
    return sliding_layers.empty() || sliding_layers[size_t(l)] ? sliding_window : 0;
  }
};

}  // namespace strata
