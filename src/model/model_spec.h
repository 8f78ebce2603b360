// Which model a config describes: its shape as checkpoints record it and its Hugging Face
// config.json (model_factory.h builds the model). No backend here: the config fuzzer links
// only this and the config readers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/gpt2_config.h"
#include "model/llama_config.h"

namespace strata {

struct ModelSpec {
  std::string arch = "gpt2";  // "gpt2" | "llama"
  GPT2Config gpt2;
  LlamaConfig llama;

  // A Strata config file, a Hugging Face config.json, or a model directory holding one.
  static ModelSpec load(const std::string& path);
  static ModelSpec from_json_text(const std::string& text, const std::string& origin);
  int vocab_size() const { return arch == "llama" ? llama.vocab_size : gpt2.vocab_size; }
  int padded_vocab_size() const { return arch == "llama" ? llama.padded_vocab_size : gpt2.padded_vocab_size; }
  int n_layer() const { return arch == "llama" ? llama.n_layer : gpt2.n_layer; }
  int n_embd() const { return arch == "llama" ? llama.n_embd : gpt2.n_embd; }
  int64_t num_params() const { return arch == "llama" ? llama.num_params() : gpt2.num_params(); }
  // Weights a token meets in a matmul: every layer's projections and the output head (the
  // embedding lookups are not matmuls; GPT-2's tied head counts once, as the head).
  double matmul_params() const;
  // Training FLOPs per token (forward + backward = 3 forwards; recomputation adds one more
  // forward): (3 + recompute)·(2·matmul_params + 4·L·T·C), where 4·L·T·C is the attention's
  // QKᵀ and AV over the full T×T (no causal discount), as in PaLM's and llm.c's MFU.
  double training_flops_per_token(int seq_len, bool recompute) const;
  // Strata's own JSON for this shape (checkpoint manifests; from_json_text reads it back).
  std::string shape_json() const;
  // Hugging Face's config.json for it.
  std::string hf_config_json(DType dtype) const;
};

}  // namespace strata
