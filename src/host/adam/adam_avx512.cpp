// AVX-512F kernel: 16 lanes, the scalar reference's operations in the same order.
#include <immintrin.h>

#include <cstdint>

#include "host/adam/adam_kernels.h"

namespace strata::host::adam_impl {

namespace {

inline __m512 load_grad16(const void* g, DType t, int64_t i) {
  if (t == DType::f32) return _mm512_loadu_ps(static_cast<const float*>(g) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(g) + i));
  if (t == DType::bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

inline __m256i to_bf16x16(__m512 v) {  // round to nearest even, NaN kept (core/dtype.h)
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  const __m512i nan = _mm512_or_si512(u, _mm512_set1_epi32(0x00400000));
  const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512i r = _mm512_srli_epi32(_mm512_mask_blend_epi32(is_nan, rounded, nan), 16);
  return _mm512_cvtepi32_epi16(r);
}

}  // namespace

bool kernel_avx512(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  const __m512 b1 = _mm512_set1_ps(c.beta1), b2 = _mm512_set1_ps(c.beta2);
  const __m512 omb1 = _mm512_set1_ps(c.one_minus_beta1), omb2 = _mm512_set1_ps(c.one_minus_beta2);
  const __m512 step = _mm512_set1_ps(c.step_size), ibc2 = _mm512_set1_ps(c.inv_sqrt_bc2);
  const __m512 eps = _mm512_set1_ps(c.eps), decay = _mm512_set1_ps(c.decay_mul), l2 = _mm512_set1_ps(c.l2);
  const __m512 gs = _mm512_set1_ps(c.grad_scale);
  const __m512i expo = _mm512_set1_epi32(0x7f800000);
  __mmask16 bad = 0;
  auto* out = static_cast<uint16_t*>(t.param_out);
  const float* p_src = t.param_in ? t.param_in : t.param;
  const float* m_src = t.m_in ? t.m_in : t.m;
  const float* v_src = t.v_in ? t.v_in : t.v;
  // Non-temporal copy-out when 32-byte aligned (see adam_avx2.cpp).
  const bool stream = out && (reinterpret_cast<uintptr_t>(out + begin) & 31) == 0;
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const __m512 raw = load_grad16(t.grad, t.grad_dtype, i);
    bad |= _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(raw), expo), expo);
    __m512 p = _mm512_loadu_ps(p_src + i);
    __m512 g = _mm512_mul_ps(raw, gs);
    g = _mm512_fmadd_ps(l2, p, g);
    const __m512 m = _mm512_fmadd_ps(b1, _mm512_loadu_ps(m_src + i), _mm512_mul_ps(omb1, g));
    const __m512 v = _mm512_fmadd_ps(b2, _mm512_loadu_ps(v_src + i), _mm512_mul_ps(_mm512_mul_ps(omb2, g), g));
    const __m512 d = _mm512_fmadd_ps(_mm512_sqrt_ps(v), ibc2, eps);
    p = _mm512_fmadd_ps(step, _mm512_div_ps(m, d), _mm512_mul_ps(p, decay));
    _mm512_storeu_ps(t.param + i, p);
    _mm512_storeu_ps(t.m + i, m);
    _mm512_storeu_ps(t.v + i, v);
    if (out) {
      const __m256i h = t.out_dtype == DType::bf16 ? to_bf16x16(p) : _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT);
      if (stream)
        _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i), h);
      else
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
    }
  }
  if (stream) _mm_sfence();
  bool nonfinite = bad != 0;
  if (i < end) nonfinite |= kernel_scalar(t, i, end, c);
  return nonfinite;
}

void stream_bound_avx512(float* p, float* m, float* v, const float* g, int64_t begin, int64_t end) {
  const __m512 a = _mm512_set1_ps(1e-7f), b = _mm512_set1_ps(2e-7f), c = _mm512_set1_ps(3e-7f);
  for (int64_t i = begin; i + 16 <= end; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    _mm512_storeu_ps(p + i, _mm512_fmadd_ps(x, a, _mm512_loadu_ps(p + i)));
    _mm512_storeu_ps(m + i, _mm512_fmadd_ps(x, b, _mm512_loadu_ps(m + i)));
    _mm512_storeu_ps(v + i, _mm512_fmadd_ps(x, c, _mm512_loadu_ps(v + i)));
  }
}

}  // namespace strata::host::adam_impl
