// GPT-2's tanh-approximated GELU and its derivative on 8 f32 lanes (simd::tanh8 instead of
// libm's scalar tanhf): gelu_forward/backward's and the fused matmul + GELU's one formula.
#pragma once
#include <immintrin.h>

#include "cpu/simd.h"

namespace strata::cpu {

inline __m256 gelu8(__m256 x) {
  const __m256 k = _mm256_set1_ps(0.7978845608028654f), a = _mm256_set1_ps(0.044715f), half = _mm256_set1_ps(0.5f);
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 th = simd::tanh8(_mm256_mul_ps(k, _mm256_fmadd_ps(a, x3, x)));
  return _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(_mm256_set1_ps(1.0f), th));
}

// d/dx gelu(x) = 0.5(1 + th) + 0.5·x·(1 - th²)·k·(1 + 3a·x²)
inline __m256 gelu_grad8(__m256 x) {
  const __m256 k = _mm256_set1_ps(0.7978845608028654f), a = _mm256_set1_ps(0.044715f), half = _mm256_set1_ps(0.5f);
  const __m256 one = _mm256_set1_ps(1.0f), x2 = _mm256_mul_ps(x, x);
  const __m256 th = simd::tanh8(_mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(a, x2), x, x)));
  const __m256 sech2 = _mm256_fnmadd_ps(th, th, one);
  const __m256 inner = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(3.0f), a), x2, one));
  return _mm256_fmadd_ps(_mm256_mul_ps(half, x), _mm256_mul_ps(sech2, inner),
                         _mm256_mul_ps(half, _mm256_add_ps(one, th)));
}

}  // namespace strata::cpu
