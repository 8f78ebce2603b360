// GPT-2 shapes, read from a JSON file in configs/ (keys as in Hugging Face's GPT-2
// config.json, or llm.c's names).
#pragma once
#include <cstdint>
#include <string>

namespace strata {

struct GPT2Config {
  int n_layer = 0, n_head = 0, n_embd = 0;
  int vocab_size = 0;         // real vocabulary (the loss runs over these)
  int padded_vocab_size = 0;  // rows of wte; multiple of 64 for matmul efficiency
  int max_seq_len = 0;        // rows of wpe (n_positions)
  // Hugging Face's dropout probabilities (embd_pdrop: on the embeddings' sum, attn_pdrop: on
  // the attention probabilities, resid_pdrop: on each block's two projections before the
  // residual add), applied in training; 0 where a config leaves them out.
  float embd_pdrop = 0, attn_pdrop = 0, resid_pdrop = 0;

  // Accepts n_layer/n_head/n_embd/vocab_size/n_positions (HF) or num_layers/.../max_seq_len;
  // unknown keys are an error naming the key and file.
  static GPT2Config load(const std::string& path);
  static GPT2Config from_json_text(const std::string& text, const std::string& origin);
  void validate(const std::string& origin) const;
  int64_t num_params() const;
};

}  // namespace strata
