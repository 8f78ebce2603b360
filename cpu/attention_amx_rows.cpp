#include "cpu/attention_amx_rows.h"

#include <cmath>

#include "cpu/simd512.h"

namespace strata::cpu {

namespace {

using simd512::exp16;
using simd512::lane_offsets;
using simd512::store16;

// Lanes of the 16 columns from j that lie in keys [0, t].
__mmask16 causal_mask(int64_t j, int64_t t) {
  const int64_t n = t + 1 - j;
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

}  // namespace

void amx_softmax_rows(bf16* p16, float* S, float* lse, int64_t T, int64_t r0, int64_t r1, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t t = r0; t < r1; ++t) {
    float* s = S + t * T;
    bf16* p = p16 + t * T;
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j <= t; j += 16) {
      const __mmask16 m = causal_mask(j, t);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), sc);
      _mm512_mask_storeu_ps(s + j, m, v);
      mx = _mm512_mask_max_ps(mx, m, mx, v);
    }
    const float row_max = _mm512_reduce_max_ps(mx);
    const __m512 shift = _mm512_set1_ps(row_max);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j <= t; j += 16) {
      const __mmask16 m = causal_mask(j, t);
      const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), shift)));
      _mm512_mask_storeu_ps(s + j, m, e);
      acc = _mm512_add_ps(acc, e);
    }
    const float sum = _mm512_reduce_add_ps(acc);
    const __m512 inv = _mm512_set1_ps(1.0f / sum);
    for (int64_t j = 0; j < r1; j += 16) {
      const __mmask16 m = causal_mask(j, t);
      store16(p + j, _mm512_maskz_mul_ps(m, _mm512_maskz_loadu_ps(m, s + j), inv));
    }
    lse[t] = row_max + std::log(sum);
  }
}

void amx_softmax_backward_rows(bf16* p16, bf16* ds16, const float* S, const float* dP, const float* lse,
                               const bf16* dout, const bf16* out, int64_t ldo, int64_t T, int64_t hd, int64_t r0,
                               int64_t r1, float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t t = r0; t < r1; ++t) {
    __m512 d = _mm512_setzero_ps();  // D = Σ dO·O = Σ_j P·dP for row t
    for (int64_t i = 0; i < hd; i += 16)
      d = _mm512_fmadd_ps(simd512::load16(dout + t * ldo + i), simd512::load16(out + t * ldo + i), d);
    const __m512 D = _mm512_set1_ps(_mm512_reduce_add_ps(d)), shift = _mm512_set1_ps(lse[t]);
    const float *s = S + t * T, *dp = dP + t * T;
    for (int64_t j = 0; j < r1; j += 16) {
      const __mmask16 m = causal_mask(j, t);
      const __m512 sv = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + j), sc);
      const __m512 p = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(sv, shift)));
      store16(p16 + t * T + j, p);
      store16(ds16 + t * T + j, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, dp + j), D)));
    }
  }
}

void amx_transpose_bf16(bf16* dst, const bf16* src, int64_t ld, int64_t rows, int64_t cols) {
  // One gather of 32-bit pairs (src[r, c], src[r, c+1]) over 16 rows gives 16 of dst row c
  // (low halves) and of dst row c+1 (high halves).
  const __m512i idx = lane_offsets(int32_t(ld / 2));  // rows, in 32-bit units
  for (int64_t r = 0; r < rows; r += 16)
    for (int64_t c = 0; c < cols; c += 2) {
      const __m512i pairs = _mm512_i32gather_epi32(idx, src + r * ld + c, 4);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + c * rows + r), _mm512_cvtepi32_epi16(pairs));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (c + 1) * rows + r),
                          _mm512_cvtepi32_epi16(_mm512_srli_epi32(pairs, 16)));
    }
}

void amx_store_transposed(bf16* dst, int64_t ld, const float* src, int64_t rows, int64_t cols) {
  const __m512i idx = lane_offsets(int32_t(rows));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 16) store16(dst + r * ld + c, _mm512_i32gather_ps(idx, src + c * rows + r, 4));
}

}  // namespace strata::cpu
