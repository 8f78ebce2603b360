// Which model a config describes: its registered family and that family's config
// (model_factory.h builds the model). No backend here: the config fuzzer links
// only this and the config readers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/gpt2_config.h"
#include "model/llama_config.h"
#include "model/model_family.h"

namespace strata {

struct ModelSpec {
  // The registered family (model_family.h) whose config this is; GPT-2 by default.
  const ModelFamily* family = &default_model_family();
  GPT2Config gpt2;    // the config of a GPT-2 family
  LlamaConfig llama;  // the config of a decoder family

  // A Strata config file, a Hugging Face config.json, or a model directory holding one.
  static ModelSpec load(const std::string& path);
  static ModelSpec from_json_text(const std::string& text, const std::string& origin);
  std::string arch() const { return family->arch(); }  // "gpt2" | "llama"
  int vocab_size() const { return family->vocab_size(*this); }
  int padded_vocab_size() const { return family->padded_vocab_size(*this); }
  int n_layer() const { return family->n_layer(*this); }
  int n_embd() const { return family->n_embd(*this); }
  int64_t num_params() const { return family->num_params(*this); }
  // Weights a token meets in a matmul: every layer's projections and the output head (the
  // embedding lookups are not matmuls; GPT-2's tied head counts once, as the head).
  double matmul_params() const;
  // Training FLOPs per token (forward + backward = 3 forwards; recomputation adds one more
  // forward): (3 + recompute)·(2·matmul_params + 4·L·T·C), where 4·L·T·C is the attention's
  // QKᵀ and AV over the full T×T (no causal discount), as in PaLM's and llm.c's MFU.
  double training_flops_per_token(int seq_len, bool recompute) const;
  // Whether the LM head is the embedding (tied), so a backward reads unit 0 even when the
  // embedding itself learns nothing (frozen weights).
  bool head_is_embedding() const;
  // Strata's own JSON for this shape (checkpoint manifests; from_json_text reads it back).
  std::string shape_json() const { return family->shape_json(*this); }
  // Hugging Face's config.json for it.
  std::string hf_config_json(DType dtype) const { return family->hf_config_json(*this, dtype); }
};

}  // namespace strata
