// The 16-bit-state update on AVX2 (adam16_impl.h): 8 lanes.
#include <immintrin.h>

#include "host/adam/adam16_impl.h"

namespace strata::host::adam_impl {

namespace {

struct Avx2 {
  using F = __m256;
  using I = __m256i;
  using Bad = __m256i;
  static constexpr int64_t W = 8;
  static F set1(float x) { return _mm256_set1_ps(x); }
  static I set1i(uint32_t x) { return _mm256_set1_epi32(int(x)); }
  static I lane_index() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static F widen16(I b) { return _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)); }
  static F load16(const uint16_t* p) {
    return widen16(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void load16x2(const uint16_t* p, F& a, F& b) { a = load16(p), b = load16(p + W); }
  static F load_grad(const void* g, DType t, int64_t i) {
    if (t == DType::f32) return _mm256_loadu_ps(static_cast<const float*>(g) + i);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(g) + i));
    return t == DType::bf16 ? widen16(_mm256_cvtepu16_epi32(h)) : _mm256_cvtph_ps(h);
  }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void bump16(uint16_t* p) {  // +1 in each of W 16-bit lanes (the bound's trivial update)
    auto* q = reinterpret_cast<__m128i*>(p);
    _mm_storeu_si128(q, _mm_add_epi16(_mm_loadu_si128(q), _mm_set1_epi16(1)));
  }
  // The high halves of a's and b's lanes (bf16 bits) as 16 values: packus interleaves the
  // 128-bit halves (lanes < 2^16 after the shift, kept exactly), one permute puts them back.
  static void store16x2(uint16_t* p, I a, I b) {
    const I packed = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  static F hi_to_f32(I x) { return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(int(0xffff0000u)))); }
  static void store_f16(uint16_t* p, F v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I bxor(I a, I b) { return _mm256_xor_si256(a, b); }
  static I band(I a, I b) { return _mm256_and_si256(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I srli16(I a) { return _mm256_srli_epi32(a, 16); }
  static I fmix(I x) {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0x85ebca6bu)));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 13));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(int(0xc2b2ae35u)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  }
  // x's bf16 bits in the high half of each lane, as round_state: (bits + r) when stochastic,
  // else to nearest even; NaN becomes f32_to_bf16's quiet NaN either way.
  static I round_hi(F x, I r, bool stochastic) {
    const I is_nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    const I quiet = _mm256_or_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x00400000));
    return _mm256_blendv_epi8(round_hi_finite(x, r, stochastic), quiet, is_nan);
  }
  // The same where x is not NaN (±Inf stays itself: mantissa 0, r < 2^16).
  static I round_hi_finite(F x, I r, bool stochastic) {
    const I u = _mm256_castps_si256(x);
    if (stochastic) return _mm256_add_epi32(u, r);
    const I lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  }
  static Bad unord(F a, F b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_UNORD_Q)); }
  static Bad either(Bad a, Bad b) { return _mm256_or_si256(a, b); }
  static Bad no_bad() { return _mm256_setzero_si256(); }
  static Bad flag(Bad b, F raw) {
    const I expo = _mm256_set1_epi32(0x7f800000);
    return _mm256_or_si256(b, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(raw), expo), expo));
  }
  static bool any(Bad b) { return !_mm256_testz_si256(b, b); }
};

}  // namespace

bool kernel16_avx2(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  return kernel16<Avx2>(t, begin, end, c);
}

void stream_bound16_avx2(void* p, bool p16, void* m, void* v, bool s16, const void* g, DType gdt, int64_t begin,
                         int64_t end) {
  stream_bound16<Avx2>(p, p16, m, v, s16, g, gdt, begin, end);
}

}  // namespace strata::host::adam_impl
