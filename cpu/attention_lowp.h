// Attention with its GEMMs on native 16-bit kernels (ops_attention_lowp.cpp), for the
// 16-bit activations of a CPU that computes in them; ops_attention.cpp calls it when
// attention_lowp_available says so, and keeps its f32 path for everything else.
#pragma once
#include <cstdint>

#include "cpu/ops.h"

namespace strata::cpu {

// bf16/f16 with native GEMMs for heads of T rows and hd columns in activations C wide (and
// STRATA_LOWP_GEMM on).
bool attention_lowp_available(DType t, int64_t T, int64_t hd, int64_t C);

void attention_forward_lowp(TensorView out, TensorView lse, TensorView qkv, int64_t B, int64_t NH, Workspace& ws,
                            const DropoutSpec& drop);
void attention_backward_lowp(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                             int64_t B, int64_t NH, Workspace& ws, const DropoutSpec& drop);

}  // namespace strata::cpu
