// row_kernels_impl.h on AVX2: 8 f32 lanes (simd.h's loads, stores and exp).
#include "cpu/act_kernels_impl.h"
#include "cpu/row_kernels_impl.h"
#include "host/simd.h"

namespace strata::cpu {

namespace {

struct Avx2 {
  using F = __m256;
  static constexpr int64_t W = 8;
  template <class T>
  static F load(const T* p) {
    return simd::load8(p);
  }
  template <class T>
  static void store(T* p, F v) {
    simd::store8(p, v);
  }
  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fnmadd(F a, F b, F c) { return _mm256_fnmadd_ps(a, b, c); }
  static float sum(F a) { return simd::hsum8(a); }
  static float hmax(F a) { return simd::hmax8(a); }
  static F exp(F a) { return simd::exp8(a); }
};

}  // namespace

template <typename T>
NormRows<T> norm_rows_avx2() {
  return row_impl::norm_rows<Avx2, T>();
}
template <typename T>
ActRows<T> act_rows_avx2() {
  return act_impl::act_rows<Avx2, T>();
}
#define STRATA_ROW_SETS(T)                  \
  template NormRows<T> norm_rows_avx2<T>(); \
  template ActRows<T> act_rows_avx2<T>();
STRATA_ROW_SETS(float)
STRATA_ROW_SETS(bf16)
STRATA_ROW_SETS(f16)
#undef STRATA_ROW_SETS

SoftmaxCeRow softmax_ce_row_avx2() { return row_impl::softmax_ce<Avx2>; }

}  // namespace strata::cpu
