// The GPT-2 parameter tensors, in llm.c's order, with their shapes and optimizer roles.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/gpt2_config.h"

namespace strata {

enum class GPT2Param {
  wte,
  wpe,
  ln1w,
  ln1b,
  qkvw,
  qkvb,
  attprojw,
  attprojb,
  ln2w,
  ln2b,
  fcw,
  fcb,
  fcprojw,
  fcprojb,
  lnfw,
  lnfb,
  count
};

struct ParamSpec {
  std::string name;   // "wte", "qkvw", ... ("h3.qkvw" in the unit layout)
  Shape shape;        // llm.c order: per-layer tensors have the layer count as dimension 0
  bool weight_decay;  // matmul weights and embeddings decay; biases and norms do not
  GPT2Param kind = GPT2Param::count;
  int layer = 0;  // unit layout: the tensor's layer (0 for global tensors)
  int unit = 0;   // unit layout: what stage 3 gathers at once
};

// llm.c's order and stacked shapes: the external format (fixtures, llm.c checkpoints).
std::vector<ParamSpec> gpt2_param_specs(const GPT2Config& c);

// The in-memory order, unit-major: unit 0 = {wte, wpe}; unit 1+l = layer l's twelve
// tensors; unit L+1 = {lnfw, lnfb}. A unit's parameters are contiguous, so ZeRO can
// gather or reduce one unit at a time.
std::vector<ParamSpec> gpt2_unit_layout(const GPT2Config& c);

}  // namespace strata
