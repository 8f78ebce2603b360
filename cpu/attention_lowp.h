// Attention with its GEMMs on Strata's bf16 kernel (ops_attention_lowp.cpp), for bf16
// activations on a CPU with AVX512-BF16; ops_attention.cpp calls it when
// attention_lowp_available says so, and keeps its f32 path for everything else.
#pragma once
#include <cstdint>

#include "cpu/ops.h"

namespace strata::cpu {

// bf16 heads of hd ≤ 512 columns, where 16-bit GEMMs take Strata's kernel (lowp_gemm_mode()
// strata, or onednn on a CPU where the kernel pays).
bool attention_lowp_available(DType t, int64_t hd);

void attention_forward_lowp(TensorView out, TensorView lse, TensorView qkv, int64_t B, int64_t NH, Workspace& ws,
                            const DropoutSpec& drop);
void attention_backward_lowp(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                             int64_t B, int64_t NH, Workspace& ws, const DropoutSpec& drop);

}  // namespace strata::cpu
