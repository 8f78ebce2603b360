// Causal multi-head attention, flash style: no T×T matrix in memory. The forward runs an
// online softmax over key tiles and saves lse; the backward recomputes P = exp(s - lse)
// tile by tile. The element math is kernels/math/attention_math.h's, and
// kernels/math/attention_host.h runs these kernels' tiles serially for the host tests.
//
// Shape of every kernel but D: a block of kWarps warps owns BR = kWarps·R consecutive rows
// of one (batch, head), R rows per warp. The block's own rows sit in shared memory
// row-major (f32, padded to a multiple of 4 so one float4 read serves four dims, and
// broadcast to the warp); the other side streams through in tiles of 32 rows, transposed
// with an odd stride (element (r, d) at d·33 + r). Per tile a lane first takes one tile
// row (scores: lane = key or query, reading down a column), then one dim chunk (d = lane +
// 32c, the accumulators for its R rows in registers) while the tile's weights come by
// shuffle; both patterns are free of bank conflicts with the odd stride.
//
// Determinism: no atomics. The backward is three kernels: D_i = Σ dout·out, dq per query
// row (keys j ≤ i), dk and dv per key row (queries i ≥ j); each writes its own columns.
#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/device_common.cuh"
#include "kernels/launch_attention.h"
#include "kernels/math/attention_math.h"

namespace strata::cuda::launch {

namespace km = strata::kernel_math;

namespace {

constexpr int kTile = km::kAttnTile;
constexpr int kStride = km::kAttnTileStride;
// Blocks of kBlock threads. No __launch_bounds__: given only the block size, ptxas aims at
// 64 registers and spills the accumulators; left alone it takes 63..107 and spills none.
constexpr int kWarps = 4;
constexpr int kBlock = kWarps * 32;
constexpr unsigned kFull = 0xffffffffu;
static_assert(kTile == 32, "a tile row per lane");

// Rows per warp: 4, or 2 at hd > 128, where each row already holds 8 accumulators a lane.
template <int NC>
constexpr int kRowsPerWarp = NC >= 8 ? 2 : 4;
template <int NC>
constexpr int kBlockRows = kWarps* kRowsPerWarp<NC>;

// One (batch, head): where its rows start and how far apart they are.
struct HeadView {
  int64_t qkv, act, stat;  // offsets into qkv/dqkv ([B,T,3C]), out/dout ([B,T,C]) and lse/D ([B,NH,T])
  int64_t C;
};
__device__ __forceinline__ HeadView head_view(int bh, int T, int NH, int hd) {
  const int b = bh / NH, h = bh % NH;
  const int64_t C = int64_t(NH) * hd;
  return HeadView{int64_t(b) * T * 3 * C + int64_t(h) * hd, int64_t(b) * T * C + int64_t(h) * hd, int64_t(bh) * T, C};
}

// dst[r·hd4 + d] = src[(row0 + r)·stride + d]·scale for r < nrows; zero past row `end`
// and in the pad columns hd..hd4, so the padded dot products add exact zeros.
template <typename T>
__device__ void stage_rows(float* dst, int nrows, const T* __restrict__ src, int64_t stride, int row0, int end, int hd,
                           int hd4, float scale) {
  for (int r = threadIdx.x / 32; r < nrows; r += kWarps)
    for (int d = threadIdx.x % 32; d < hd4; d += 32) {
      const int row = row0 + r;
      dst[r * hd4 + d] = row < end && d < hd ? load(src, int64_t(row) * stride + d) * scale : 0.0f;
    }
}

// One tile of kTile rows, transposed: dst[d·kStride + r] (global reads coalesced over d).
template <typename T>
__device__ void stage_tile(float* dst, const T* __restrict__ src, int64_t stride, int row0, int end, int hd, int hd4,
                           float scale) {
  for (int r = threadIdx.x / 32; r < kTile; r += kWarps)
    for (int d = threadIdx.x % 32; d < hd4; d += 32) {
      const int row = row0 + r;
      dst[d * kStride + r] = row < end && d < hd ? load(src, int64_t(row) * stride + d) * scale : 0.0f;
    }
}

// acc[r] += Σ_d rows[r·hd4 + d]·tile[d·kStride + lane], d in increasing order (as the host
// driver's dot). The rows' float4 reads are warp broadcasts.
template <int R>
__device__ __forceinline__ void dot_rows_tile(float (&acc)[R], const float* rows, const float* tile, int hd4,
                                              int lane) {
  for (int d = 0; d < hd4; d += 4) {
    const float* t = tile + d * kStride + lane;
    const float t0 = t[0], t1 = t[kStride], t2 = t[2 * kStride], t3 = t[3 * kStride];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float4 x = *reinterpret_cast<const float4*>(rows + r * hd4 + d);
      acc[r] += x.x * t0;
      acc[r] += x.y * t1;
      acc[r] += x.z * t2;
      acc[r] += x.w * t3;
    }
  }
}

// ---- forward ----
template <typename T, int NC>
__global__ void attention_forward_kernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ qkv, int B,
                                         int Tn, int NH, int hd, float scale, DropoutSpec drop, AttentionSpec spec,
                                         km::AttnRecords rec) {
  constexpr int R = kRowsPerWarp<NC>, BR = kBlockRows<NC>;
  extern __shared__ float4 smem4[];
  const int hd4 = km::attn_padded_hd(hd), BNH = B * NH, nrb = (Tn + BR - 1) / BR;
  // The last row blocks see the most keys: launch them first so the tail is short.
  const int bh = blockIdx.x % BNH, i0 = (nrb - 1 - int(blockIdx.x) / BNH) * BR;
  const HeadView hv = head_view(bh, Tn, NH, hd);
  const T* q = qkv + hv.qkv;
  float* Qs = reinterpret_cast<float*>(smem4);
  float* Kt = Qs + BR * hd4;
  float* Vt = Kt + hd4 * kStride;
  stage_rows(Qs, BR, q, 3 * hv.C, i0, Tn, hd, hd4, scale);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const float* myQ = Qs + warp * R * hd4;
  const int b = bh / NH;
  int row[R], first[R];  // rows past T compute as row T-1 (a finite state) and are not stored
  km::SoftmaxState st[R];
  float acc[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    row[r] = min(i0 + warp * R + r, Tn - 1);
    first[r] = km::attn_record_first(rec, b, Tn, row[r]);
    st[r] = km::softmax_init();
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
  }
  // BR divides kTile, so every row of the block has its last key in the block's last tile.
  static_assert(kTile % BR == 0, "a block's rows share their last tile");
  const int ntiles = (min(i0 + BR, Tn) - 1) / kTile + 1;
  // The block's first row has the earliest record start of its rows (and the earliest window).
  const int t0 = max(km::attn_first_key_tile(i0, spec.window), km::attn_record_first(rec, b, Tn, i0) / kTile);
  for (int t = t0; t < ntiles; ++t) {
    const int j0 = t * kTile;
    __syncthreads();  // the previous tile has been read
    stage_tile(Kt, q + hv.C, 3 * hv.C, j0, Tn, hd, hd4, 1.0f);
    stage_tile(Vt, q + 2 * hv.C, 3 * hv.C, j0, Tn, hd, hd4, 1.0f);
    __syncthreads();  // the tile (and on the first pass Qs) is visible
    float s[R] = {}, p[R];
    dot_rows_tile<R>(s, myQ, Kt, hd4, lane);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      s[r] = km::attn_masked_score(km::attn_capped_score(s[r], spec.softcap),
                                   km::attn_visible(row[r], j0 + lane, spec.window, first[r]));
      const float alpha = km::softmax_rescale(st[r], warp_max(s[r]));
      p[r] = km::softmax_weight(s[r], st[r]);
      km::softmax_accumulate(st[r], warp_sum(p[r]));
      if (drop.active())  // after the sum: the softmax's denominator is the undropped one
        p[r] *= km::dropout_mult(drop, km::attn_dropout_index(drop, bh / NH, bh % NH, row[r], j0 + lane, NH, Tn));
#pragma unroll
      for (int c = 0; c < NC; ++c) acc[r][c] *= alpha;
    }
    const int jn = min(kTile, Tn - j0);  // keys past T have weight 0: skip them
    for (int jj = 0; jj < jn; ++jj) {
      float pj[R];
#pragma unroll
      for (int r = 0; r < R; ++r) pj[r] = __shfl_sync(kFull, p[r], jj);
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d = lane + 32 * c;
        if (d < hd) {
          const float v = Vt[d * kStride + jj];
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][c] += pj[r] * v;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = i0 + warp * R + r;
    if (i >= Tn) continue;
    const float inv = km::softmax_inv(st[r]);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) store(out, hv.act + int64_t(i) * hv.C + d, acc[r][c] * inv);
    }
    if (lane == 0) lse[hv.stat + i] = km::softmax_lse(st[r]);
  }
}

// ---- backward ----
// D_i = Σ_c dout_ic·out_ic over the head's columns: one warp per (batch, head, row).
template <typename T>
__global__ void attention_d_kernel(float* __restrict__ D, const T* __restrict__ dout, const T* __restrict__ out, int B,
                                   int Tn, int NH, int hd) {
  const int64_t n = int64_t(blockIdx.x) * km::kRowsPerBlock + threadIdx.x / 32;
  if (n >= int64_t(B) * NH * Tn) return;  // whole warps leave together
  const int lane = threadIdx.x % 32, i = int(n % Tn);
  const HeadView hv = head_view(int(n / Tn), Tn, NH, hd);
  const int64_t base = hv.act + int64_t(i) * hv.C;
  float s = 0.0f;
  for (int d = lane; d < hd; d += 32) s += load(dout, base + d) * load(out, base + d);
  s = warp_sum(s);
  if (lane == 0) D[n] = s;
}

// dq_i = scale·Σ_{j ≤ i} dS_ij k_j: query rows in the block, key tiles streamed.
template <typename T, int NC>
__global__ void attention_dq_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                                    const float* __restrict__ lse, const float* __restrict__ Dg, int B, int Tn, int NH,
                                    int hd, float scale, DropoutSpec drop, AttentionSpec spec, km::AttnRecords rec) {
  constexpr int R = kRowsPerWarp<NC>, BR = kBlockRows<NC>;
  extern __shared__ float4 smem4[];
  const int hd4 = km::attn_padded_hd(hd), BNH = B * NH, nrb = (Tn + BR - 1) / BR;
  const int bh = blockIdx.x % BNH, i0 = (nrb - 1 - int(blockIdx.x) / BNH) * BR;  // heaviest first
  const HeadView hv = head_view(bh, Tn, NH, hd);
  const T* q = qkv + hv.qkv;
  float* Qs = reinterpret_cast<float*>(smem4);
  float* dOs = Qs + BR * hd4;
  float* Kt = dOs + BR * hd4;
  float* Vt = Kt + hd4 * kStride;
  stage_rows(Qs, BR, q, 3 * hv.C, i0, Tn, hd, hd4, scale);
  stage_rows(dOs, BR, dout + hv.act, hv.C, i0, Tn, hd, hd4, 1.0f);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int b = bh / NH;
  int row[R], first[R];  // rows past T compute as row T-1 and are not stored
  float L[R], Drow[R], acc[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    row[r] = min(i0 + warp * R + r, Tn - 1);
    first[r] = km::attn_record_first(rec, b, Tn, row[r]);
    L[r] = lse[hv.stat + row[r]];
    Drow[r] = Dg[hv.stat + row[r]];
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
  }
  static_assert(kTile % BR == 0, "a block's rows share their last tile");
  const int ntiles = (min(i0 + BR, Tn) - 1) / kTile + 1;
  const int t0 = max(km::attn_first_key_tile(i0, spec.window), km::attn_record_first(rec, b, Tn, i0) / kTile);
  for (int t = t0; t < ntiles; ++t) {
    const int j0 = t * kTile;
    __syncthreads();
    stage_tile(Kt, q + hv.C, 3 * hv.C, j0, Tn, hd, hd4, 1.0f);
    stage_tile(Vt, q + 2 * hv.C, 3 * hv.C, j0, Tn, hd, hd4, 1.0f);
    __syncthreads();
    float s[R] = {}, dp[R] = {}, ds[R];
    dot_rows_tile<R>(s, Qs + warp * R * hd4, Kt, hd4, lane);
    dot_rows_tile<R>(dp, dOs + warp * R * hd4, Vt, hd4, lane);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float p;
      const float m =
          drop.active()
              ? km::dropout_mult(drop, km::attn_dropout_index(drop, bh / NH, bh % NH, row[r], j0 + lane, NH, Tn))
              : 1.0f;
      km::attn_grad_pair(km::attn_capped_score(s[r], spec.softcap), dp[r], L[r], Drow[r],
                         km::attn_visible(row[r], j0 + lane, spec.window, first[r]), m, spec.softcap, &p, &ds[r]);
    }
    const int jn = min(kTile, Tn - j0);
    for (int jj = 0; jj < jn; ++jj) {
      float dsj[R];
#pragma unroll
      for (int r = 0; r < R; ++r) dsj[r] = __shfl_sync(kFull, ds[r], jj);
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d = lane + 32 * c;
        if (d < hd) {
          const float k = Kt[d * kStride + jj];
#pragma unroll
          for (int r = 0; r < R; ++r) acc[r][c] += dsj[r] * k;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = i0 + warp * R + r;
    if (i >= Tn) continue;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) store(dqkv, hv.qkv + int64_t(i) * 3 * hv.C + d, acc[r][c] * scale);
    }
  }
}

// dk_j = Σ_{i ≥ j} dS_ij (q_i·scale), dv_j = Σ_{i ≥ j} P_ij dout_i: key rows in the block,
// query tiles streamed from the one holding the block's first key to the end.
template <typename T, int NC>
__global__ void attention_dkv_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
                                     const float* __restrict__ lse, const float* __restrict__ Dg, int B, int Tn, int NH,
                                     int hd, float scale, DropoutSpec drop, AttentionSpec spec, km::AttnRecords rec) {
  constexpr int R = kRowsPerWarp<NC>, BR = kBlockRows<NC>;
  extern __shared__ float4 smem4[];
  const int hd4 = km::attn_padded_hd(hd), BNH = B * NH;
  const int bh = blockIdx.x % BNH, j0 = int(blockIdx.x) / BNH * BR;  // the first key blocks see the most queries
  const HeadView hv = head_view(bh, Tn, NH, hd);
  const T* q = qkv + hv.qkv;
  float* Ks = reinterpret_cast<float*>(smem4);
  float* Vs = Ks + BR * hd4;
  float* Qt = Vs + BR * hd4;
  float* dOt = Qt + hd4 * kStride;
  stage_rows(Ks, BR, q + hv.C, 3 * hv.C, j0, Tn, hd, hd4, 1.0f);
  stage_rows(Vs, BR, q + 2 * hv.C, 3 * hv.C, j0, Tn, hd, hd4, 1.0f);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float dk[R][NC], dv[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) dk[r][c] = dv[r][c] = 0.0f;
  // BR divides kTile, so the block's first tile is every one of its keys' first tile.
  static_assert(kTile % BR == 0, "a block's rows share their first tile");
  // The block's last key has the latest window and record end of its keys.
  const int b = bh / NH, last_key = min(j0 + BR, Tn) - 1;
  const int last_tile =
      min(km::attn_last_query_tile(last_key, spec.window, Tn), km::attn_record_last(rec, b, Tn, last_key) / kTile);
  for (int t = j0 / kTile; t <= last_tile; ++t) {
    const int i0 = t * kTile, i = i0 + lane;
    __syncthreads();
    stage_tile(Qt, q, 3 * hv.C, i0, Tn, hd, hd4, scale);
    stage_tile(dOt, dout + hv.act, hv.C, i0, Tn, hd, hd4, 1.0f);
    __syncthreads();
    const bool in = i < Tn;  // queries past T are zero in the tile and masked here
    const int first = in ? km::attn_record_first(rec, b, Tn, i) : 0;
    const float Li = in ? lse[hv.stat + i] : 0.0f, Di = in ? Dg[hv.stat + i] : 0.0f;
    float s[R] = {}, dp[R] = {}, p[R], ds[R];
    dot_rows_tile<R>(s, Ks + warp * R * hd4, Qt, hd4, lane);
    dot_rows_tile<R>(dp, Vs + warp * R * hd4, dOt, hd4, lane);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int j = j0 + warp * R + r;
      const float m = drop.active() && in
                          ? km::dropout_mult(drop, km::attn_dropout_index(drop, bh / NH, bh % NH, i, j, NH, Tn))
                          : 1.0f;
      km::attn_grad_pair(km::attn_capped_score(s[r], spec.softcap), dp[r], Li, Di,
                         in && km::attn_visible(i, j, spec.window, first), m, spec.softcap, &p[r], &ds[r]);
    }
    const int in_n = min(kTile, Tn - i0);
    for (int ii = 0; ii < in_n; ++ii) {
      float pi[R], dsi[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        pi[r] = __shfl_sync(kFull, p[r], ii);
        dsi[r] = __shfl_sync(kFull, ds[r], ii);
      }
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int d = lane + 32 * c;
        if (d < hd) {
          const float g = dOt[d * kStride + ii], x = Qt[d * kStride + ii];
#pragma unroll
          for (int r = 0; r < R; ++r) {
            dv[r][c] += pi[r] * g;
            dk[r][c] += dsi[r] * x;
          }
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int j = j0 + warp * R + r;
    if (j >= Tn) continue;
    const int64_t base = hv.qkv + int64_t(j) * 3 * hv.C;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int d = lane + 32 * c;
      if (d < hd) {
        store(dqkv, base + hv.C + d, dk[r][c]);
        store(dqkv, base + 2 * hv.C + d, dv[r][c]);
      }
    }
  }
}

// ---- launch helpers ----
// Calls f(std::integral_constant<int, NC>) with NC = the lane chunks hd needs.
template <typename F>
void dispatch_chunks(int hd, F&& f) {
  switch (km::attn_lane_chunks(hd)) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 4:
      return f(std::integral_constant<int, 4>{});
    default:
      return f(std::integral_constant<int, 8>{});
  }
}

void check_shape(const char* op, int B, int T, int NH, int hd, int rows_per_block) {
  if (hd < 1 || hd > km::kAttnMaxHeadDim) fail(op, "head dim must be 1..256", __FILE__, __LINE__);
  const int64_t blocks = int64_t(B) * NH * ((T + rows_per_block - 1) / rows_per_block);
  if (blocks > INT_MAX) fail(op, "B·NH·T too large for one grid", __FILE__, __LINE__);
}

// Dynamic shared memory past the default 48 KiB must be allowed per kernel (and device).
template <typename K>
void allow_smem(K* kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    STRATA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

size_t smem_bytes(int block_rows, int row_sets, int hd) {
  return (size_t(row_sets) * block_rows * km::attn_padded_hd(hd) + 2 * km::attn_tile_floats(hd)) * sizeof(float);
}

}  // namespace

void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int NH, int hd, int dtype,
                       const DropoutSpec& drop, const AttentionSpec& spec, const kernel_math::AttnRecords& rec,
                       void* stream) {
  if (B <= 0 || T <= 0 || NH <= 0) return;
  const float scale = km::attn_scale(hd, spec);
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    dispatch_chunks(hd, [&](auto nc) {
      constexpr int NC = decltype(nc)::value, BR = kBlockRows<NC>;
      check_shape("attention_forward", B, T, NH, hd, BR);
      const int blocks = B * NH * ((T + BR - 1) / BR);
      const size_t smem = smem_bytes(BR, 1, hd);
      allow_smem(attention_forward_kernel<E, NC>, smem);
      attention_forward_kernel<E, NC><<<blocks, kBlock, smem, as_stream(stream)>>>(
          static_cast<E*>(out), lse, static_cast<const E*>(qkv), B, T, NH, hd, scale, drop, spec, rec);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  });
}

void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse, void* scratch,
                        int B, int T, int NH, int hd, int dtype, const DropoutSpec& drop, const AttentionSpec& spec,
                        const kernel_math::AttnRecords& rec, void* stream) {
  if (B <= 0 || T <= 0 || NH <= 0) return;
  const float scale = km::attn_scale(hd, spec);
  float* D = static_cast<float*>(scratch);
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    dispatch_chunks(hd, [&](auto nc) {
      constexpr int NC = decltype(nc)::value, BR = kBlockRows<NC>;
      check_shape("attention_backward", B, T, NH, hd, BR);
      const cudaStream_t s = as_stream(stream);
      attention_d_kernel<E><<<km::grid_for_rows(int64_t(B) * NH * T), km::kThreads, 0, s>>>(
          D, static_cast<const E*>(dout), static_cast<const E*>(out), B, T, NH, hd);
      STRATA_CUDA_CHECK_LAUNCH();
      const int blocks = B * NH * ((T + BR - 1) / BR);
      const size_t smem = smem_bytes(BR, 2, hd);
      allow_smem(attention_dq_kernel<E, NC>, smem);
      attention_dq_kernel<E, NC><<<blocks, kBlock, smem, s>>>(static_cast<E*>(dqkv), static_cast<const E*>(dout),
                                                              static_cast<const E*>(qkv), lse, D, B, T, NH, hd, scale,
                                                              drop, spec, rec);
      STRATA_CUDA_CHECK_LAUNCH();
      allow_smem(attention_dkv_kernel<E, NC>, smem);
      attention_dkv_kernel<E, NC><<<blocks, kBlock, smem, s>>>(static_cast<E*>(dqkv), static_cast<const E*>(dout),
                                                               static_cast<const E*>(qkv), lse, D, B, T, NH, hd, scale,
                                                               drop, spec, rec);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace strata::cuda::launch
