// The AMX attention's row work (cpu/attention_amx.cpp), 16 lanes wide: the causal softmax and
// its backward fused with the rounding to bf16 that the tile products take, and the per-head
// transposes. Built for AVX-512 F/BW/VL, which every CPU with AMX has; entered only where
// amx_ready(). Without dropout: attention_amx.cpp keeps the f32 rows (attention_rows.h) for it.
//
// The caller checks the shapes (attention_amx.cpp): this file builds no strings, so no inline
// library function is instantiated here for AVX-512 and then chosen by the linker elsewhere.
//
// Rows [r0, r1) are one causal block: row t holds keys [0, t] and is written to column r1 with
// zeros in (t, r1), so a product over the block's keys reads no stale column.
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

// The scores are S·scale (S: q·kᵀ, row stride T; the scaling here rather than in a pass of its
// own, the same product). P16 rows = bf16(softmax(scores over keys [0, t])), lse[t] = their
// log-sum-exp; S keeps exp(scores − max) in columns [0, t].
void amx_softmax_rows(bf16* p16, float* S, float* lse, int64_t T, int64_t r0, int64_t r1, float scale);

// P16 rows = bf16(P), dS16 rows = bf16(P ∘ (dP − D)) with P = exp(S·scale − lse) and D =
// Σ dout·out over the row's hd columns (dout, out row stride ldo).
void amx_softmax_backward_rows(bf16* p16, bf16* ds16, const float* S, const float* dP, const float* lse,
                               const bf16* dout, const bf16* out, int64_t ldo, int64_t T, int64_t hd, int64_t r0,
                               int64_t r1, float scale);

// dst[c, r] = src[r, c] for rows × cols bf16 (src row stride ld, even); rows a multiple of 16,
// cols even.
void amx_transpose_bf16(bf16* dst, const bf16* src, int64_t ld, int64_t rows, int64_t cols);

// dst rows r (row stride ld) = bf16(src[c, r]) for src cols × rows f32; cols a multiple of 16.
void amx_store_transposed(bf16* dst, int64_t ld, const float* src, int64_t rows, int64_t cols);

}  // namespace strata::cpu
