#include "cpu/dout_split.h"

#include <algorithm>
#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "host/convert.h"
#include "host/simd.h"

namespace strata::cpu {

namespace {

// 8×8 f32 transpose in registers: r[i] becomes column i.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4)
    for (int j = 0; j < 2; ++j) {
      u[i + j] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      u[i + j + 2] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  // u[0], u[2], u[1], u[3] hold columns 0|4, 1|5, 2|6, 3|7 of rows 0-3 (u[4..7]: rows 4-7).
  const int col_of[4] = {0, 2, 1, 3};
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[col_of[c]], u[4 + col_of[c]], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(u[col_of[c]], u[4 + col_of[c]], 0x31);
  }
}

// Appends row n's element at column v when it is above the threshold; false on overflow.
inline bool keep(SparseLo& s, int64_t n, int64_t v, float x, bf16 h) {
  if (!(std::fabs(x) > s.threshold[n])) return true;
  const int32_t k = s.count[n]++;
  if (k >= int32_t(kSparseLoPerRow)) return false;
  s.column[n * kSparseLoPerRow + k] = int32_t(v);
  s.value[n * kSparseLoPerRow + k] = x - to_f32(h);
  return true;
}

}  // namespace

size_t sparse_lo_bytes(int64_t N) { return size_t(N) * (2 + 2 * kSparseLoPerRow) * 4; }

SparseLo sparse_lo_in(void* scratch, int64_t N) {
  float* f = static_cast<float*>(scratch);
  return {f, reinterpret_cast<int32_t*>(f + N), reinterpret_cast<int32_t*>(f + 2 * N), f + (2 + kSparseLoPerRow) * N};
}

void sparse_lo_thresholds(SparseLo& s, const float* x, int64_t ldx, int64_t N, int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = x + n * ldx;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    int64_t v = 0;
    for (; v + 8 <= cols; v += 8) m = _mm256_max_ps(m, _mm256_and_ps(simd::load8(row + v), abs_mask));
    float lanes[8], most = 0;
    _mm256_storeu_ps(lanes, m);
    for (float l : lanes) most = std::max(most, l);
    for (; v < cols; ++v) most = std::max(most, std::fabs(row[v]));
    s.threshold[n] = kSparseLoFraction * most;
  }
}

bool split_bf16_transposed(bf16* hi, bf16* lo, SparseLo* sparse, const float* x, int64_t ldx, int64_t N, int64_t vc) {
  const int64_t N8 = N / 8 * 8, V8 = vc / 8 * 8;
  if (sparse) std::fill(sparse->count, sparse->count + N, 0);
  bool fits = true;
  // Tiles of 32 rows, each tile's rows owned by one thread (their entries are appended in
  // column order); within a tile, 64 columns at a time, so each output row gets whole
  // 64-byte lines. The tile's 32 rows are read as 32 streams, more than the hardware's
  // prefetcher follows, so each is prefetched 4 blocks ahead (which shortens GPT-2's split,
  // 1024 rows × 50304, on AMX CPUs).
  constexpr int64_t kAhead = 4;
#pragma omp parallel for schedule(static) reduction(&& : fits)
  for (int64_t n0 = 0; n0 < N8; n0 += 32)
    for (int64_t v0 = 0; v0 < V8; v0 += 64) {
      if (v0 + 64 * kAhead < V8)
        for (int64_t n = n0; n < std::min(n0 + 32, N8); ++n)
          for (int l = 0; l < 4; ++l)
            _mm_prefetch(reinterpret_cast<const char*>(x + n * ldx + v0 + 64 * kAhead + 16 * l), _MM_HINT_T0);
      for (int64_t n = n0; n < std::min(n0 + 32, N8); n += 8)
        for (int64_t v = v0; v < std::min(v0 + 64, V8); v += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = simd::load8(x + (n + i) * ldx + v);
          if (sparse) {
            const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
            for (int i = 0; i < 8; ++i) {
              const __m256 big =
                  _mm256_cmp_ps(_mm256_and_ps(r[i], abs_mask), _mm256_set1_ps(sparse->threshold[n + i]), _CMP_GT_OQ);
              for (int bits = _mm256_movemask_ps(big); bits; bits &= bits - 1) {
                const int j = __builtin_ctz(unsigned(bits));
                const float f = x[(n + i) * ldx + v + j];
                fits = keep(*sparse, n + i, v + j, f, from_f32<bf16>(f)) && fits;
              }
            }
          }
          transpose8(r);
          for (int i = 0; i < 8; ++i) {
            bf16* h = hi + (v + i) * N + n;
            simd::store8(h, r[i]);
            if (lo) simd::store8(lo + (v + i) * N + n, _mm256_sub_ps(r[i], simd::load8(h)));
          }
        }
    }
  // The tails: columns past V8 of every row, every column of rows past N8 (in column order).
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = n < N8 ? V8 : 0; v < vc; ++v) {
      const float f = x[n * ldx + v];
      const bf16 h = from_f32<bf16>(f);
      hi[v * N + n] = h;
      if (lo) lo[v * N + n] = from_f32<bf16>(f - to_f32(h));
      if (sparse) fits = keep(*sparse, n, v, f, h) && fits;
    }
  return fits;
}

namespace {

// a[:C] += f · b[:C]
inline void axpy_row(float* a, float f, const bf16* b, int64_t C) {
  const __m256 vf = _mm256_set1_ps(f);
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) simd::store8(a + c, _mm256_fmadd_ps(vf, simd::load8(b + c), simd::load8(a + c)));
  for (; c < C; ++c) a[c] = std::fma(f, to_f32(b[c]), a[c]);
}

}  // namespace

void add_sparse_lo(float* acc, const SparseLo& s, const bf16* w, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int32_t k = 0; k < s.count[n]; ++k)
      axpy_row(acc + n * C, s.value[n * kSparseLoPerRow + k], w + int64_t(s.column[n * kSparseLoPerRow + k]) * C, C);
}

void add_sparse_lo_dw(float* dw, const SparseLo& s, const bf16* x, int64_t N, int64_t C, int64_t vc) {
#pragma omp parallel
  {
#ifdef _OPENMP
    const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
#else
    const int64_t t = 0, threads = 1;
#endif
    const int64_t v0 = vc * t / threads, v1 = vc * (t + 1) / threads;
    for (int64_t n = 0; n < N; ++n)
      for (int32_t k = 0; k < s.count[n]; ++k) {
        const int64_t v = s.column[n * kSparseLoPerRow + k];
        if (v >= v0 && v < v1) axpy_row(dw + v * C, s.value[n * kSparseLoPerRow + k], x + n * C, C);
      }
  }
}

}  // namespace strata::cpu
