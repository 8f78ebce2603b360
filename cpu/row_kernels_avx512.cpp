// row_kernels_impl.h on AVX-512: 16 f32 lanes (simd512.h's loads, stores and exp). Built for
// AVX-512 F/BW/VL and entered only where ops_isa_supported(OpsIsa::avx512).
#include "cpu/act_kernels_impl.h"
#include "cpu/row_kernels_impl.h"
#include "cpu/simd512.h"

namespace strata::cpu {

namespace {

struct Avx512 {
  using F = __m512;
  static constexpr int64_t W = 16;
  template <class T>
  static F load(const T* p) {
    return simd512::load16(p);
  }
  template <class T>
  static void store(T* p, F v) {
    simd512::store16(p, v);
  }
  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fnmadd(F a, F b, F c) { return _mm512_fnmadd_ps(a, b, c); }
  static float sum(F a) { return _mm512_reduce_add_ps(a); }
  static float hmax(F a) { return _mm512_reduce_max_ps(a); }
  static F exp(F a) { return simd512::exp16(a); }
};

}  // namespace

template <typename T>
NormRows<T> norm_rows_avx512() {
  return row_impl::norm_rows<Avx512, T>();
}
template <typename T>
ActRows<T> act_rows_avx512() {
  return act_impl::act_rows<Avx512, T>();
}
#define STRATA_ROW_SETS(T)                    \
  template NormRows<T> norm_rows_avx512<T>(); \
  template ActRows<T> act_rows_avx512<T>();
STRATA_ROW_SETS(float)
STRATA_ROW_SETS(bf16)
STRATA_ROW_SETS(f16)
#undef STRATA_ROW_SETS

SoftmaxCeRow softmax_ce_row_avx512() { return row_impl::softmax_ce<Avx512>; }

}  // namespace strata::cpu
