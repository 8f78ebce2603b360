// Built for AVX512-BF16 (bench/CMakeLists.txt); entered only where gemm_bf16_supported().
#include "bench/bf16_dot_rate.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace strata::bench {

double bf16_dot_speedup() {
  // 12 independent accumulator chains each (more than latency × ports on any AVX-512 core),
  // 4096 steps, best of 5: a few milliseconds once.
  auto best_of = [](auto body) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      body();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  constexpr int kSteps = 4096;
  volatile float sink = 0;
  const double t_bf16 = best_of([&] {
    __m512 c[12];
    for (auto& x : c) x = _mm512_setzero_ps();
    __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80), b = (__m512bh)_mm512_set1_epi32(0x00010001);
    for (int i = 0; i < kSteps; ++i) {
#pragma GCC unroll 12
      for (int j = 0; j < 12; ++j) c[j] = _mm512_dpbf16_ps(c[j], a, b);
      __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 s = c[0];
    for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, c[j]);
    sink = sink + _mm512_reduce_add_ps(s);
  });
  const double t_f32 = best_of([&] {
    __m512 c[12];
    for (auto& x : c) x = _mm512_setzero_ps();
    __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-30f);
    for (int i = 0; i < kSteps; ++i) {
#pragma GCC unroll 12
      for (int j = 0; j < 12; ++j) c[j] = _mm512_fmadd_ps(a, b, c[j]);
      __asm__ volatile("" : "+v"(a), "+v"(b));
    }
    __m512 s = c[0];
    for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, c[j]);
    sink = sink + _mm512_reduce_add_ps(s);
  });
  // A vdpbf16ps does twice the multiply-adds of a vfmadd231ps.
  return 2.0 * t_f32 / t_bf16;
}

}  // namespace strata::bench
