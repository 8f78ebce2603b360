// The 16-bit-state update on AVX-512 (adam16_impl.h): 16 lanes. The rounding is integer
// arithmetic, not AVX512-BF16's vcvtneps2bf16, which treats denormal inputs as zero and so
// would not match the other kernels bit for bit.
#include <immintrin.h>

#include "host/adam/adam16_impl.h"

namespace strata::host::adam_impl {

namespace {

// Word-permute indices (plain data: nothing runs before the CPU is checked): kOdd gathers the
// odd words of two vectors.
struct WordIndex {
  alignas(64) uint16_t w[32];
};
constexpr WordIndex word_index(int first, int step, int div) {
  WordIndex t{};
  for (int j = 0; j < 32; ++j) t.w[j] = uint16_t(first + j * step / div);
  return t;
}
constexpr WordIndex kOdd = word_index(1, 2, 1);

struct Avx512 {
  using F = __m512;
  using I = __m512i;
  using Bad = __mmask16;
  static constexpr int64_t W = 16;
  static F set1(float x) { return _mm512_set1_ps(x); }
  static I set1i(uint32_t x) { return _mm512_set1_epi32(int(x)); }
  static I lane_index() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static F widen16(I b) { return _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)); }
  // 32 bf16 values as two vectors, each half zero-extended and shifted into the high half of
  // its lanes: a little faster in cache than one load and a word permute per vector
  // (strata bench adam --state-dtype bf16 --sizes 1M compares them).
  static void load16x2(const uint16_t* p, F& a, F& b) {
    a = widen16(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
    b = widen16(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16))));
  }
  static F load_grad(const void* g, DType t, int64_t i) {
    if (t == DType::f32) return _mm512_loadu_ps(static_cast<const float*>(g) + i);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(g) + i));
    return t == DType::bf16 ? widen16(_mm512_cvtepu16_epi32(h)) : _mm512_cvtph_ps(h);
  }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void bump16(uint16_t* p) {  // +1 in each of W 16-bit lanes (the bound's trivial update)
    auto* q = reinterpret_cast<__m256i*>(p);
    _mm256_storeu_si256(q, _mm256_add_epi16(_mm256_loadu_si256(q), _mm256_set1_epi16(1)));
  }
  // The high halves of a's and b's lanes (bf16 bits) as 32 values: one two-source permute.
  static void store16x2(uint16_t* p, I a, I b) {
    _mm512_storeu_si512(p, _mm512_permutex2var_epi16(a, _mm512_load_si512(kOdd.w), b));
  }
  static F hi_to_f32(I x) { return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(int(0xffff0000u)))); }
  static void store_f16(uint16_t* p, F v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I bxor(I a, I b) { return _mm512_xor_si512(a, b); }
  static I band(I a, I b) { return _mm512_and_si512(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I srli16(I a) { return _mm512_srli_epi32(a, 16); }
  static I fmix(I x) {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int(0x85ebca6bu)));
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 13));
    x = _mm512_mullo_epi32(x, _mm512_set1_epi32(int(0xc2b2ae35u)));
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  }
  // x's bf16 bits in the high half of each lane, as round_state: (bits + r) when stochastic,
  // else to nearest even; NaN becomes f32_to_bf16's quiet NaN either way.
  static I round_hi(F x, I r, bool stochastic) {
    const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const I quiet = _mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x00400000));
    return _mm512_mask_mov_epi32(round_hi_finite(x, r, stochastic), is_nan, quiet);
  }
  // The same where x is not NaN (±Inf stays itself: mantissa 0, r < 2^16).
  static I round_hi_finite(F x, I r, bool stochastic) {
    const I u = _mm512_castps_si512(x);
    if (stochastic) return _mm512_add_epi32(u, r);
    const I lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  }
  static Bad unord(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q); }
  static Bad either(Bad a, Bad b) { return a | b; }
  static Bad no_bad() { return 0; }
  static Bad flag(Bad b, F raw) {
    const I expo = _mm512_set1_epi32(0x7f800000);
    return b | _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(raw), expo), expo);
  }
  static bool any(Bad b) { return b != 0; }
};

}  // namespace

bool kernel16_avx512(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  return kernel16<Avx512>(t, begin, end, c);
}

void stream_bound16_avx512(void* p, bool p16, void* m, void* v, bool s16, const void* g, DType gdt, int64_t begin,
                           int64_t end) {
  stream_bound16<Avx512>(p, p16, m, v, s16, g, gdt, begin, end);
}

}  // namespace strata::host::adam_impl
