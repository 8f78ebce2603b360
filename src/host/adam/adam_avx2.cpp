// AVX2 + FMA + F16C kernel: 8 lanes, the scalar reference's operations in the same order.
#include <immintrin.h>

#include <cstdint>

#include "host/adam/adam_kernels.h"
#include "host/simd.h"

namespace strata::host::adam_impl {

namespace {

inline __m256 load_grad8(const void* g, DType t, int64_t i) {
  if (t == DType::f32) return _mm256_loadu_ps(static_cast<const float*>(g) + i);
  if (t == DType::bf16) return simd::load8(static_cast<const bf16*>(g) + i);
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(g) + i)));
}

}  // namespace

bool kernel_avx2(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  const __m256 b1 = _mm256_set1_ps(c.beta1), b2 = _mm256_set1_ps(c.beta2);
  const __m256 omb1 = _mm256_set1_ps(c.one_minus_beta1), omb2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 step = _mm256_set1_ps(c.step_size), ibc2 = _mm256_set1_ps(c.inv_sqrt_bc2);
  const __m256 eps = _mm256_set1_ps(c.eps), decay = _mm256_set1_ps(c.decay_mul), l2 = _mm256_set1_ps(c.l2);
  const __m256 gs = _mm256_set1_ps(c.grad_scale);
  const __m256i expo = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  auto* out = static_cast<uint16_t*>(t.param_out);
  const float* p_src = t.param_in ? t.param_in : t.param;
  const float* m_src = t.m_in ? t.m_in : t.m;
  const float* v_src = t.v_in ? t.v_in : t.v;
  // The copy-out is write-only: non-temporal stores skip the read-for-ownership of its
  // lines (2 of the 32 bytes a parameter would otherwise move) when it is 16-byte aligned.
  const bool stream = out && (reinterpret_cast<uintptr_t>(out + begin) & 15) == 0;
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 raw = load_grad8(t.grad, t.grad_dtype, i);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(raw), expo), expo));
    __m256 p = _mm256_loadu_ps(p_src + i);
    __m256 g = _mm256_mul_ps(raw, gs);
    g = _mm256_fmadd_ps(l2, p, g);
    const __m256 m = _mm256_fmadd_ps(b1, _mm256_loadu_ps(m_src + i), _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_fmadd_ps(b2, _mm256_loadu_ps(v_src + i), _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    const __m256 d = _mm256_fmadd_ps(_mm256_sqrt_ps(v), ibc2, eps);
    p = _mm256_fmadd_ps(step, _mm256_div_ps(m, d), _mm256_mul_ps(p, decay));
    _mm256_storeu_ps(t.param + i, p);
    _mm256_storeu_ps(t.m + i, m);
    _mm256_storeu_ps(t.v + i, v);
    if (out) {
      const __m128i h =
          t.out_dtype == DType::bf16 ? simd::pack_bf16x8(p) : _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT);
      if (stream)
        _mm_stream_si128(reinterpret_cast<__m128i*>(out + i), h);
      else
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
  }
  if (stream) _mm_sfence();  // order the streamed stores before the caller reads them
  bool nonfinite = !_mm256_testz_si256(bad, bad);
  if (i < end) nonfinite |= kernel_scalar(t, i, end, c);
  return nonfinite;
}

void stream_bound_avx2(float* p, float* m, float* v, const float* g, int64_t begin, int64_t end) {
  const __m256 a = _mm256_set1_ps(1e-7f), b = _mm256_set1_ps(2e-7f), c = _mm256_set1_ps(3e-7f);
  for (int64_t i = begin; i + 8 <= end; i += 8) {
    const __m256 x = _mm256_loadu_ps(g + i);
    _mm256_storeu_ps(p + i, _mm256_fmadd_ps(x, a, _mm256_loadu_ps(p + i)));
    _mm256_storeu_ps(m + i, _mm256_fmadd_ps(x, b, _mm256_loadu_ps(m + i)));
    _mm256_storeu_ps(v + i, _mm256_fmadd_ps(x, c, _mm256_loadu_ps(v + i)));
  }
}

}  // namespace strata::host::adam_impl
