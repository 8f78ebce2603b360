// AVX-512 building blocks for the CPU ops' row kernels: 16-wide loads/stores of f32, bf16 or
// f16 (RNE, NaN kept) and exp, the 16-lane twins of simd.h's. Header-only; included only by
// files built for AVX-512 (F, BW, VL) and entered after a cpuid check.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu::simd512 {

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const bf16* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load16(const f16* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

inline void store16(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
// 16 lanes rounded to bf16 (round to nearest even; NaN stays a quiet NaN: simd::pack_bf16x8's
// contract), packed.
inline __m256i pack_bf16x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q),
                            _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}
inline void store16(bf16* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack_bf16x16(v)); }
inline void store16(f16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Lane i holds i·stride: a gather's offsets for 16 rows stride elements apart.
inline __m512i lane_offsets(int32_t stride) {
  return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(stride));
}

// exp(x): simd::exp8's algorithm and constants on 16 lanes (same results lane for lane).
inline __m512 exp16(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.7228f), lo = _mm512_set1_ps(-87.3365f);
  const __m512 orig = x;
  const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_cvtps_epi32(fx);
  const __m512i e1 = _mm512_srai_epi32(e, 1), e2 = _mm512_sub_epi32(e, e1);
  auto pow2 = [](__m512i k) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
  };
  y = _mm512_mul_ps(_mm512_mul_ps(y, pow2(e1)), pow2(e2));
  y = _mm512_maskz_mov_ps(__mmask16(~under), y);  // below the range: 0
  return _mm512_mask_mov_ps(y, is_nan, orig);
}

}  // namespace strata::cpu::simd512
