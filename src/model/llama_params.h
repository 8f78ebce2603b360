// The Llama-family decoder's parameter tensors and their unit-major layout (no backend: the
// config readers, the Hugging Face tables and the planner use it without building a model).
#pragma once
#include <vector>

#include "model/llama_config.h"
#include "model/param_spec.h"

namespace strata {

// (Appended kinds keep the numbers, and so the initial weights, of the kinds before them.)
enum class LlamaParam {
  embed,
  attn_norm,
  wq,
  wk,
  wv,
  wo,
  mlp_norm,
  w_gate,
  w_up,
  w_down,
  norm,
  lm_head,
  bq,
  bk,
  bv,
  q_norm,
  k_norm,
  bo,
  post_attn_norm,  // the norm after attention (OLMo-2, Gemma)
  post_mlp_norm,   // the norm after the MLP (OLMo-2, Gemma)
  count
};

// The unit-major layout (`llama_kind` says which tensor a ParamSpec is).
std::vector<ParamSpec> llama_unit_layout(const LlamaConfig& c);
LlamaParam llama_kind(const ParamSpec& s);

}  // namespace strata
