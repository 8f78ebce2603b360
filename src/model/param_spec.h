// One parameter tensor of a model's table: its name, shape, optimizer role and where it
// sits in the unit-major layout. `kind` is the family's own tag (GPT2Param, LlamaParam).
#pragma once
#include <string>

#include "core/tensor.h"

namespace strata {

struct ParamSpec {
  std::string name;   // "wte", "qkvw", ... ("h3.qkvw" in the unit layout)
  Shape shape;        // llm.c order: per-layer tensors have the layer count as dimension 0
  bool weight_decay;  // matmul weights and embeddings decay; biases and norms do not
  int kind = -1;      // the family's tensor kind (gpt2_kind, llama_kind)
  int layer = 0;      // unit layout: the tensor's layer (0 for global tensors)
  int unit = 0;       // unit layout: what stage 3 gathers at once
};

}  // namespace strata
