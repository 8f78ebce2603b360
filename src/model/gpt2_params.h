// The GPT-2 parameter tensors, in llm.c's order, with their shapes and optimizer roles.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/gpt2_config.h"

namespace strata {

enum class GPT2Param { wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b,
                       fcw, fcb, fcprojw, fcprojb, lnfw, lnfb, count };

struct ParamSpec {
  std::string name;  // "wte", "qkvw", ...
  Shape shape;       // per-layer tensors have the layer count as dimension 0
  bool weight_decay; // matmul weights and embeddings decay; biases and norms do not
};

std::vector<ParamSpec> gpt2_param_specs(const GPT2Config& c);

}  // namespace strata
