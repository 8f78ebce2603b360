// Causal attention for one (batch, head) on AMX tiles, for bf16 activations where
// 16-bit GEMMs run on AMX: the same contract as ops_attention.cpp's f32 path (forward keeps
// the output and the per-row log-sum-exp; backward recomputes the probabilities), with all
// five products on Strata's tile kernel (cpu/gemm_amx.h). The scores and the softmax stay
// f32; the probabilities and dS go into their products rounded to bf16 once, as PyTorch's
// autocast rounds them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/math/dropout_math.h"

namespace strata::cpu {

struct HeadView {
  const bf16* q;
  const bf16* k;
  const bf16* v;
  int64_t ld;  // row stride of q, k and v (3C in the fused qkv)
};

// Whether a head of T rows and hd columns goes this way (T, hd multiples of 32; AMX ready).
bool attention_amx_fits(int64_t T, int64_t hd);

// Per-thread scratch, in floats.
size_t attention_amx_forward_floats(int64_t T, int64_t hd);
size_t attention_amx_backward_floats(int64_t T, int64_t hd);

// out rows (row stride ldo) and lse [T] of one head.
void attention_amx_forward_head(bf16* out, int64_t ldo, float* lse, const HeadView& x, int64_t T, int64_t hd,
                                const DropoutSpec& drop, int64_t b, int64_t h, int64_t NH, float* scratch);

// dq, dk, dv rows (row stride lddx, the fused dqkv's) from dout and out rows (row stride ldo).
void attention_amx_backward_head(bf16* dq, bf16* dk, bf16* dv, int64_t lddx, const bf16* dout, const bf16* out,
                                 int64_t ldo, const float* lse, const HeadView& x, int64_t T, int64_t hd,
                                 const DropoutSpec& drop, int64_t b, int64_t h, int64_t NH, float* scratch);

}  // namespace strata::cpu
