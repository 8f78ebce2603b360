// gemm_bf16's packing, register tile and driver (see gemm_bf16.h), built for AVX512-BF16.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/gemm_bf16.h"
#include "cpu/omp_threads.h"
#include "cpu/simd512.h"

namespace strata::cpu {

namespace {

using namespace bf16gemm;

inline uint16_t rne_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays a quiet NaN
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Elements k and k+1 of a contiguous run as one bf16 pair (k+1 past K: 0).
inline uint32_t pair_at(const uint16_t* src, int64_t k, int64_t K) {
  uint32_t v;
  if (k + 1 < K)
    std::memcpy(&v, src + k, 4);
  else
    v = k < K ? src[k] : 0;
  return v;
}

inline __mmask16 lane_mask(int64_t valid) {
  return valid >= 16 ? __mmask16(0xffff) : valid <= 0 ? __mmask16(0) : __mmask16((1u << valid) - 1);
}
inline __m512i widen16(const uint16_t* p, __mmask16 m) { return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)); }

// In place: lane j of r[i] goes to lane i of r[j] (16×16 32-bit elements, 64 shuffles).
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(u[i + j], u[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(u[i + j], u[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

// Sixteen runs of 16 pairs (rows [0, rows) of `src` with stride ld, from element k; the
// rest 0) turned so that r[q] holds pair q of every run: the packed layouts' order.
inline void pairs_by_step(__m512i r[16], const uint16_t* src, int64_t ld, int64_t rows, int64_t k) {
  for (int64_t i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_loadu_si512(src + i * ld + k) : _mm512_setzero_si512();
  transpose16(r);
}

// A's rows [m0, m0+mc) and pair steps [p0, p0+kp) as 12-row micro-panels: panel t holds, for
// each step p, the 12 rows' pairs (32 bits each) side by side; rows past mc and k past K are 0.
void pack_a(uint32_t* dst, const GemmOperand& A, int64_t K, int64_t m0, int64_t mc, int64_t p0, int64_t kp) {
  for (int64_t t = 0; t * kMR < mc; ++t) {
    uint32_t* d = dst + t * kp * kMR;
    const int64_t rows = std::min(kMR, mc - t * kMR), mb = m0 + t * kMR;
    if (rows < kMR) std::memset(d, 0, size_t(kp * kMR) * 4);
    const uint16_t* a = static_cast<const uint16_t*>(A.data);
    if (!A.trans) {  // row m's pairs are contiguous: 16 steps at a time, turned in registers
      int64_t p = 0;
      for (; p + 16 <= kp && 2 * (p0 + p + 16) <= K; p += 16) {
        __m512i r[16];
        pairs_by_step(r, a + mb * A.ld, A.ld, rows, 2 * (p0 + p));
        for (int64_t q = 0; q < 16; ++q) _mm512_mask_storeu_epi32(d + (p + q) * kMR, __mmask16(0x0fff), r[q]);
      }
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* src = a + (mb + r) * A.ld;
        for (int64_t q = p; q < kp; ++q) d[q * kMR + r] = pair_at(src, 2 * (p0 + q), K);
      }
    } else {  // stored K×M: a pair is two rows' elements, the 12 rows side by side in each
      const __mmask16 m = lane_mask(rows);
      for (int64_t p = 0; p < kp; ++p) {
        const int64_t k = 2 * (p0 + p);
        const __m512i lo = k < K ? widen16(a + k * A.ld + mb, m) : _mm512_setzero_si512();
        const __m512i hi = k + 1 < K ? widen16(a + (k + 1) * A.ld + mb, m) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(d + p * kMR, __mmask16(0x0fff), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
    }
  }
}


// B's columns [n0, n0+nv) (nv ≤ 32) and pair steps [p0, p0+kp) as one micro-panel: for each
// step, 32 columns' pairs.
void pack_b(uint32_t* d, const GemmOperand& B, int64_t K, int64_t n0, int64_t nv, int64_t p0, int64_t kp) {
  const __mmask16 m0 = lane_mask(nv), m1 = lane_mask(nv - 16);
  if (!B.trans) {  // stored K×N: rows are contiguous columns
    const uint16_t* base = static_cast<const uint16_t*>(B.data);
    for (int64_t p = 0; p < kp; ++p) {
      const int64_t k = 2 * (p0 + p);
      const uint16_t* r0 = base + k * B.ld + n0;
      const __m512i a0 = widen16(r0, m0), a1 = widen16(r0 + 16, m1);
      const bool second = k + 1 < K;
      const __m512i b0 = second ? widen16(r0 + B.ld, m0) : _mm512_setzero_si512();
      const __m512i b1 = second ? widen16(r0 + B.ld + 16, m1) : _mm512_setzero_si512();
      _mm512_store_si512(d + p * kNR, _mm512_or_si512(a0, _mm512_slli_epi32(b0, 16)));
      _mm512_store_si512(d + p * kNR + 16, _mm512_or_si512(a1, _mm512_slli_epi32(b1, 16)));
    }
    return;
  }
  // stored N×K: column n's k run is contiguous; 16 steps of 16 columns at a time, turned in
  // registers
  if (nv < kNR) std::memset(d, 0, size_t(kp * kNR) * 4);
  const uint16_t* b = static_cast<const uint16_t*>(B.data) + n0 * B.ld;
  int64_t p = 0;
  for (; p + 16 <= kp && 2 * (p0 + p + 16) <= K; p += 16)
    for (int64_t half = 0; half * 16 < nv; ++half) {
      __m512i r[16];
      pairs_by_step(r, b + half * 16 * B.ld, B.ld, nv - half * 16, 2 * (p0 + p));
      for (int64_t q = 0; q < 16; ++q) _mm512_store_si512(d + (p + q) * kNR + half * 16, r[q]);
    }
  for (int64_t c = 0; c < nv; ++c) {
    const uint16_t* src = b + c * B.ld;
    for (int64_t q = p; q < kp; ++q) d[q * kNR + c] = pair_at(src, 2 * (p0 + q), K);
  }
}

// What a tile does with its sums (see the driver).
struct Epilogue {
  float alpha, beta;
  bool first, last;  // the first / last K block
  const LowpOut* out;
  float* acc;  // f32 sums between K blocks of a bf16 output (row stride acc_ld), else null
  int64_t acc_ld;
};

inline __m512 load_bias(const LowpOut& o, int64_t col, __mmask16 m) {
  if (o.bias_dtype == DType::f32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(o.bias) + col);
  return _mm512_castsi512_ps(_mm512_slli_epi32(widen16(static_cast<const uint16_t*>(o.bias) + col, m), 16));
}

inline void store16(const Epilogue& e, __m512 v, int64_t row, int64_t col, __mmask16 m) {
  if (!m) return;
  const LowpOut& o = *e.out;
  v = _mm512_mul_ps(v, _mm512_set1_ps(e.alpha));
  if (o.dtype == DType::f32) {
    float* c = static_cast<float*>(o.data) + row * o.ld + col;
    if (!e.first)
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, c));
    else {
      if (e.beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(e.beta), _mm512_maskz_loadu_ps(m, c), v);
      if (o.bias) v = _mm512_add_ps(v, load_bias(o, col, m));
    }
    _mm512_mask_storeu_ps(c, m, v);
    return;
  }
  if (!e.first) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, e.acc + row * e.acc_ld + col));
  if (!e.last) {
    _mm512_mask_storeu_ps(e.acc + row * e.acc_ld + col, m, v);
    return;
  }
  if (o.bias) v = _mm512_add_ps(v, load_bias(o, col, m));
  _mm256_mask_storeu_epi16(static_cast<uint16_t*>(o.data) + row * o.ld + col, m, simd512::pack_bf16x16(v));
}

// The register tile: MR rows × 32 columns of f32 sums over kp pair steps.
template <int MR>
void tile(int64_t kp, const uint32_t* __restrict a, const uint32_t* __restrict b, const Epilogue& e, int64_t row,
          int64_t col, int64_t nv) {
  __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) c0[i] = c1[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kp; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_load_si512(b + p * kNR);
    const __m512bh b1 = (__m512bh)_mm512_load_si512(b + p * kNR + 16);
    const uint32_t* ap = a + p * kMR;
#pragma GCC unroll 12
    for (int i = 0; i < MR; ++i) {
      const __m512bh ai = (__m512bh)_mm512_set1_epi32(int(ap[i]));
      c0[i] = _mm512_dpbf16_ps(c0[i], ai, b0);
      c1[i] = _mm512_dpbf16_ps(c1[i], ai, b1);
    }
  }
  const __mmask16 m0 = lane_mask(nv), m1 = lane_mask(nv - 16);
#pragma GCC unroll 12
  for (int i = 0; i < MR; ++i) {
    store16(e, c0[i], row + i, col, m0);
    store16(e, c1[i], row + i, col + 16, m1);
  }
}

using TileFn = void (*)(int64_t, const uint32_t*, const uint32_t*, const Epilogue&, int64_t, int64_t, int64_t);
constexpr TileFn kTiles[kMR] = {tile<1>, tile<2>, tile<3>, tile<4>,  tile<5>,  tile<6>,
                                tile<7>, tile<8>, tile<9>, tile<10>, tile<11>, tile<12>};

uint32_t* aligned(char*& p, size_t bytes) {
  p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
  uint32_t* r = reinterpret_cast<uint32_t*>(p);
  p += bytes;
  return r;
}

}  // namespace

void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
               const LowpOut& C, void* scratch, int threads) {
  if (M == 0 || N == 0) return;
  const int64_t P = pair_steps(K);
  const int64_t kc = std::min(kKC, std::max<int64_t>(P, 1)), mc_max = std::min(kMC, round_up(M, kMR)),
                nc_max = std::min(kNC, round_up(N, kNR));
  char* s = static_cast<char*>(scratch);
  uint32_t* apack = aligned(s, size_t(threads) * size_t(mc_max * kc) * 4);
  uint32_t* bpack = aligned(s, size_t(kc * nc_max) * 4);
  float* acc = C.dtype != DType::f32 && P > kKC ? reinterpret_cast<float*>(aligned(s, size_t(M * N) * 4)) : nullptr;
  // The team's work: each thread one contiguous share of the rows (equal to a tile, so no
  // thread waits on another's last block), or, with too few rows for that, of the columns.
  const int64_t rsplit = threads > 1 && M >= threads * 4 * kMR ? threads : 1, csplit = threads / rsplit;
  auto row_at = [&](int64_t i) { return i >= rsplit ? M : std::min(M, round_up(M * i / rsplit, kMR)); };
  for (int64_t n0 = 0; n0 < N; n0 += kNC) {
    const int64_t nc = std::min(kNC, N - n0), ntiles = (nc + kNR - 1) / kNR;
    // K == 0 still runs one (empty) block so the epilogue applies beta and the bias.
    for (int64_t p0 = 0; p0 == 0 || p0 < P; p0 += kKC) {
      const int64_t kp = std::min(kKC, P - p0);
      const Epilogue e{alpha, beta, p0 == 0, p0 + kp >= P, &C, acc, N};
#pragma omp parallel num_threads(threads) if (threads > 1)
      {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < ntiles; ++t)
          pack_b(bpack + t * kp * kNR, B, K, n0 + t * kNR, std::min(kNR, nc - t * kNR), p0, kp);
#pragma omp for schedule(static)
        for (int64_t item = 0; item < rsplit * csplit; ++item) {
          const int64_t ri = item / csplit, ci = item % csplit;
          const int64_t t0 = ntiles * ci / csplit, t1 = ntiles * (ci + 1) / csplit;
          uint32_t* ap = apack + (threads > 1 ? thread_id() : 0) * mc_max * kc;
          for (int64_t m0 = row_at(ri); m0 < row_at(ri + 1); m0 += mc_max) {
            const int64_t rows = std::min(mc_max, row_at(ri + 1) - m0);
            pack_a(ap, A, K, m0, rows, p0, kp);
            for (int64_t t = t0; t < t1; ++t)
              for (int64_t i = 0; i < rows; i += kMR)
                kTiles[std::min(kMR, rows - i) - 1](kp, ap + (i / kMR) * kp * kMR, bpack + t * kp * kNR, e, m0 + i,
                                                    n0 + t * kNR, std::min(kNR, nc - t * kNR));
          }
        }
      }
    }
  }
}

}  // namespace strata::cpu
