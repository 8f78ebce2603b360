// Llama-family shapes (RMSNorm, rotary positions, SwiGLU, grouped-query attention, untied
// head, no biases), read from a Hugging Face config.json (model_type "llama") or Strata's own
// JSON ("arch": "llama" with the same key names).
#pragma once
#include <cstdint>
#include <string>

namespace strata {

struct LlamaConfig {
  int n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0, intermediate = 0;
  int vocab_size = 0, padded_vocab_size = 0, max_seq_len = 0;
  float rms_eps = 1e-5f, rope_theta = 10000.0f;

  // Keys as Hugging Face names them (hidden_size, intermediate_size, num_hidden_layers,
  // num_attention_heads, num_key_value_heads, rms_norm_eps, rope_theta, vocab_size,
  // max_position_embeddings); a key that would change the computation (biases, tied
  // embeddings, rope scaling, another activation) is refused, bookkeeping keys are ignored,
  // anything else is an error naming it.
  static LlamaConfig from_json_text(const std::string& text, const std::string& origin);
  int head_dim() const { return n_embd / n_head; }
  int64_t num_params() const;
  void validate(const std::string& origin) const;
};

// "llama" or "gpt2": which architecture a model config describes (by model_type or arch).
std::string model_arch_of(const std::string& config_text, const std::string& origin);

}  // namespace strata
