// Causal multi-head self-attention, one (batch, head) block at a time.
//
// Forward keeps only the output and the per-row log-sum-exp (f32 [B,NH,T]); backward
// recomputes the probabilities of one head at a time from Q, K and the saved LSE, so no
// B×NH×T×T tensor ever exists. Each thread holds one head's T×T block in its scratch.
// Scores and the softmax are f32; in a bf16 run the two score GEMMs may run on the bf16
// kernel (scores_native below), and on AMX every product runs on tiles (on_amx below).
#include <cmath>
#include <type_traits>

#include "cpu/attention_amx.h"
#include "cpu/attention_rows.h"
#include "cpu/gemm.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_path.h"
#include "cpu/omp_threads.h"
#include "cpu/ops.h"
#include "host/convert.h"
#include "host/simd.h"

namespace strata::cpu {

namespace {

struct Dims {
  int64_t B, T, C, NH, hd;
};

Dims dims_of(const TensorView& qkv, int n_head) {
  Dims d{qkv.shape[0], qkv.shape[1], qkv.shape[2] / 3, n_head, 0};
  STRATA_CHECK(qkv.shape.rank == 3 && qkv.shape[2] % 3 == 0 && d.C % n_head == 0,
               "attention: qkv shape " + qkv.shape.str() + " does not split into " + std::to_string(n_head) + " heads",
               "qkv must be [B, T, 3C] with C divisible by the head count");
  d.hd = d.C / n_head;
  return d;
}

// Copies rows [0,T) of a head's hd columns (row stride `stride`) into dense f32, scaled.
template <typename T>
void gather_head(float* dst, const T* src, int64_t rows, int64_t hd, int64_t stride, float scale = 1.0f) {
  for (int64_t t = 0; t < rows; ++t) {
    host::convert_to_f32(dst + t * hd, src + t * stride, dtype_of<T>(), size_t(hd));
    if (scale != 1.0f)
      for (int64_t i = 0; i < hd; ++i) dst[t * hd + i] *= scale;
  }
}

template <typename T>
void scatter_head(T* dst, const float* src, int64_t rows, int64_t hd, int64_t stride) {
  for (int64_t t = 0; t < rows; ++t) host::convert_from_f32(dst + t * stride, dtype_of<T>(), src + t * hd, size_t(hd));
}

// The two score-shaped GEMMs (q·kᵀ and dO·vᵀ) read two bf16 activations: on Strata's bf16
// kernel where it pays (lowp_gemm_mode() strata), straight from the activations. The GEMMs
// that take the probabilities or dS stay f32 sgemm, so P and dS are never rounded.
bool scores_native(DType t) { return t == DType::bf16 && lowp_gemm_mode() == LowpGemm::strata; }

size_t score_scratch_floats(bool native, int64_t T, int64_t hd) {
  return native ? (gemm_bf16_scratch_bytes(T, T, hd, DType::f32, 1) + 3) / 4 : 0;
}

// S[rows, cols] (row stride T) = alpha · a·bᵀ for rows of two bf16 activations (row strides
// lda, ldb).
template <typename A>
void scores_bf16(float* S, const A* a, const A* b, int64_t lda, int64_t ldb, int64_t rows, int64_t cols, int64_t T,
                 int64_t hd, float alpha, float* scratch) {
  if constexpr (std::is_same_v<A, bf16>)
    gemm_bf16(rows, cols, hd, alpha, {a, DType::bf16, lda, false}, {b, DType::bf16, ldb, true}, 0.0f,
              LowpOut{S, DType::f32, T}, scratch, 1);
}

// Where 16-bit GEMMs go to oneDNN's AMX matmul, a bf16 head runs whole on Strata's AMX tiles
// (cpu/attention_amx.h): oneDNN's matmul takes a non-AMX GEMM for these strided per-head
// shapes, and sgemm on f32 copies runs at a fraction of the tiles' rate.
bool on_amx(DType t, int64_t T, int64_t hd) {
  return t == DType::bf16 && lowp_gemm_mode() == LowpGemm::onednn && attention_amx_fits(T, hd);
}

// f(b, h, scratch) for every (batch, head) on the OpenMP team, each thread with its own
// per_thread floats of the attention scratch.
template <typename F>
void for_each_head(const Dims& d, size_t per_thread, Workspace& ws, F&& f) {
  float* scratch = ws.get<float>(Scratch::attention, per_thread * size_t(thread_count()));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < d.B * d.NH; ++bh) f(bh / d.NH, bh % d.NH, scratch + per_thread * size_t(thread_id()));
}

// Causality in blocks: query rows [r0, r1) attend to keys [0, r1) only, so every GEMM of a
// head skips the blocks above the diagonal (5/8 of the full T×T work at T = 4 blocks); the
// diagonal blocks' upper triangles are the zeros the row functions write.
constexpr int64_t kCausalBlock = 64;
template <typename F>
void causal_blocks(int64_t T, F&& f) {
  for (int64_t r0 = 0; r0 < T; r0 += kCausalBlock) f(r0, std::min(T, r0 + kCausalBlock));
}

// The window the row functions apply: none when every key of a causal prefix is inside it.
// (The GEMMs still cover the causal blocks; the rows zero what the window hides.)
int64_t sliding(int window, int64_t T) { return window > 0 && window < T ? window : 0; }
// Attention as softmax(q·kᵀ/√d) alone: what the AMX tiles compute. A window, another scale or
// a soft-cap takes the generic path.
bool plain(int64_t window, const AttentionSpec& spec) { return window == 0 && spec.scale <= 0 && spec.softcap <= 0; }

// The records of a packed row: f(s0, n) for each run [s0, s0+n) of positions counting 0, 1, …
// (the whole row when there are no positions).
template <typename F>
void for_each_record(const int32_t* row_pos, int64_t T, F&& f) {
  int64_t s0 = 0;
  for (int64_t t = 1; row_pos && t < T; ++t)
    if (row_pos[t] == 0) f(s0, t - s0), s0 = t;
  f(s0, T - s0);
}
const int32_t* row_positions(std::span<const int32_t> positions, int64_t b, int64_t T) {
  return positions.empty() ? nullptr : positions.data() + b * T;
}

}  // namespace

void attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head, Workspace& ws,
                       const DropoutSpec& drop, const AttentionSpec& spec, std::span<const int32_t> positions) {
  const Dims d = dims_of(qkv, n_head);
  const int64_t T = d.T, hd = d.hd, C = d.C;
  expect_numel(out, d.B * T * C, "attention_forward", "out");
  expect_numel(lse, d.B * d.NH * T, "attention_forward", "lse");
  check_positions(positions, d.B, T, "attention_forward");
  if (on_amx(qkv.dtype, T, hd) && out.dtype == DType::bf16 && plain(sliding(spec.window, T), spec) &&
      positions.empty()) {
    for_each_head(d, attention_amx_forward_floats(T, hd), ws, [&](int64_t b, int64_t h, float* scratch) {
      const bf16* base = qkv.as<bf16>() + b * T * 3 * C + h * hd;
      attention_amx_forward_head(out.as<bf16>() + b * T * C + h * hd, C, lse.as<float>() + (b * d.NH + h) * T,
                                 {base, base + C, base + 2 * C, 3 * C}, T, hd, drop, b, h, d.NH, scratch);
    });
    return;
  }
  const bool native = scores_native(qkv.dtype);
  // Per thread: S/P [T,T], q, k, v, o [T,hd] and the score GEMM's pack scratch.
  const size_t per_thread = size_t(T * T + 4 * T * hd) + score_scratch_floats(native, T, hd);
  float* scratch = ws.get<float>(Scratch::attention, per_thread * size_t(thread_count()));
  float* L = lse.as<float>();
  const float scale = kernel_math::attn_scale(int(hd), spec);
  dispatch_act(out.dtype, [&]<typename A>(A) {
    const A* x = qkv.as<A>();
    A* y = out.as<A>();
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      const int64_t b = bh / d.NH, h = bh % d.NH;
      float* S = scratch + per_thread * size_t(thread_id());
      float *q = S + T * T, *k = q + T * hd, *v = k + T * hd, *o = v + T * hd, *gs = o + T * hd;
      // Each record [s0, s0+n) of the row on its own: S is n×n (row stride n).
      for_each_record(row_positions(positions, b, T), T, [&](int64_t s0, int64_t n) {
        const A* base = x + (b * T + s0) * 3 * C + h * hd;
        const int64_t w = sliding(spec.window, n);
        gather_head(v, base + 2 * C, n, hd, 3 * C);
        if (!native) {
          gather_head(q, base, n, hd, 3 * C, scale);
          gather_head(k, base + C, n, hd, 3 * C);
        }
        causal_blocks(n, [&](int64_t r0, int64_t r1) {  // S = q·k^T (scaled)
          if (native)                                   // from the bf16 activations in place
            scores_bf16(S + r0 * n, base + r0 * 3 * C, base + C, 3 * C, 3 * C, r1 - r0, r1, n, hd, scale, gs);
          else
            sgemm(false, true, r1 - r0, r1, hd, 1.0f, q + r0 * hd, hd, k, hd, 0.0f, S + r0 * n, n);
        });
        causal_softmax_rows(S, n, L + bh * T + s0, n, HeadDrop{drop, b, h, d.NH, T, s0}, w, spec.softcap);
        causal_blocks(n, [&](int64_t r0, int64_t r1) {  // o = P·v
          sgemm(false, false, r1 - r0, hd, r1, 1.0f, S + r0 * n, n, v, hd, 0.0f, o + r0 * hd, hd);
        });
        scatter_head(y + (b * T + s0) * C + h * hd, o, n, hd, C);
      });
    }
  });
}

void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse, int n_head,
                        Workspace& ws, const DropoutSpec& drop, const AttentionSpec& spec,
                        std::span<const int32_t> positions) {
  const Dims d = dims_of(qkv, n_head);
  const int64_t T = d.T, hd = d.hd, C = d.C;
  expect_numel(dqkv, d.B * T * 3 * C, "attention_backward", "dqkv");
  expect_numel(dout, d.B * T * C, "attention_backward", "dout");
  check_positions(positions, d.B, T, "attention_backward");
  if (on_amx(qkv.dtype, T, hd) && dout.dtype == DType::bf16 && out.dtype == DType::bf16 && dqkv.dtype == DType::bf16 &&
      plain(sliding(spec.window, T), spec) && positions.empty()) {
    for_each_head(d, attention_amx_backward_floats(T, hd), ws, [&](int64_t b, int64_t h, float* scratch) {
      const bf16* base = qkv.as<bf16>() + b * T * 3 * C + h * hd;
      bf16* dbase = dqkv.as<bf16>() + b * T * 3 * C + h * hd;
      attention_amx_backward_head(dbase, dbase + C, dbase + 2 * C, 3 * C, dout.as<bf16>() + b * T * C + h * hd,
                                  out.as<bf16>() + b * T * C + h * hd, C, lse.as<float>() + (b * d.NH + h) * T,
                                  {base, base + C, base + 2 * C, 3 * C}, T, hd, drop, b, h, d.NH, scratch);
    });
    return;
  }
  const bool native = scores_native(qkv.dtype) && dout.dtype == qkv.dtype;
  // Per thread: P and dP [T,T]; q, k, v, o, do, dq, dk, dv [T,hd]; the score GEMMs' scratch.
  const size_t per_thread = size_t(2 * T * T + 8 * T * hd) + score_scratch_floats(native, T, hd);
  float* scratch = ws.get<float>(Scratch::attention, per_thread * size_t(thread_count()));
  const float* L = lse.as<float>();
  const float scale = kernel_math::attn_scale(int(hd), spec);
  dispatch_act(dqkv.dtype, [&]<typename A>(A) {
    const A* x = qkv.as<A>();
    const A* y = out.as<A>();
    const A* dy = dout.as<A>();
    A* dx = dqkv.as<A>();
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < d.B * d.NH; ++bh) {
      const int64_t b = bh / d.NH, h = bh % d.NH;
      float* P = scratch + per_thread * size_t(thread_id());
      float* dP = P + T * T;
      float *q = dP + T * T, *k = q + T * hd, *v = k + T * hd, *o = v + T * hd;
      float *dO = o + T * hd, *dq = dO + T * hd, *dk = dq + T * hd, *dv = dk + T * hd, *gs = dv + T * hd;
      // Each record [s0, s0+n) of the row on its own: P and dP are n×n (row stride n).
      for_each_record(row_positions(positions, b, T), T, [&](int64_t s0, int64_t n) {
        const A* base = x + (b * T + s0) * 3 * C + h * hd;
        const A* dyh = dy + (b * T + s0) * C + h * hd;
        const int64_t w = sliding(spec.window, n);
        const HeadDrop hdrop{drop, b, h, d.NH, T, s0};
        gather_head(q, base, n, hd, 3 * C, scale);
        gather_head(k, base + C, n, hd, 3 * C);
        gather_head(o, y + (b * T + s0) * C + h * hd, n, hd, C);
        gather_head(dO, dyh, n, hd, C);
        causal_blocks(n, [&](int64_t r0, int64_t r1) {  // scores
          if (native)
            scores_bf16(P + r0 * n, base + r0 * 3 * C, base + C, 3 * C, 3 * C, r1 - r0, r1, n, hd, scale, gs);
          else
            sgemm(false, true, r1 - r0, r1, hd, 1.0f, q + r0 * hd, hd, k, hd, 0.0f, P + r0 * n, n);
        });
        const float* lrow = L + bh * T + s0;
        for (int64_t t = 0; t < n && spec.softcap <= 0; ++t) {  // (capped: in softcap_backward_row)
          float* p = P + t * n;
          const int64_t lo = first_visible_key(t, w);
          simd::exp_shift_sum(p + lo, t + 1 - lo, lrow[t]);
          for (int64_t j = 0; j < lo; ++j) p[j] = 0;
          for (int64_t j = t + 1; j < n; ++j) p[j] = 0;
        }
        if (!native) gather_head(v, base + 2 * C, n, hd, 3 * C);
        causal_blocks(n, [&](int64_t r0, int64_t r1) {  // dP' = dO·v^T
          if (native)                                   // from the bf16 activations in place
            scores_bf16(dP + r0 * n, dyh + r0 * C, base + 2 * C, C, 3 * C, r1 - r0, r1, n, hd, 1.0f, gs);
          else
            sgemm(false, true, r1 - r0, r1, hd, 1.0f, dO + r0 * hd, hd, v, hd, 0.0f, dP + r0 * n, n);
        });
        for (int64_t t = 0; t < n; ++t) {
          float D = 0;  // Σ_i dO·O = Σ_j P'·dP' for row t
          for (int64_t i = 0; i < hd; ++i) D += dO[t * hd + i] * o[t * hd + i];
          if (spec.softcap > 0)
            softcap_backward_row(dP + t * n, P + t * n, lrow[t], D, t, n, hdrop, w, spec.softcap);
          else
            softmax_backward_row(dP + t * n, P + t * n, D, t, n, hdrop, w);  // dv below takes P'
        }
        // Key rows [c0, c1) get gradient from query rows [c0, n) only.
        causal_blocks(n, [&](int64_t c0, int64_t c1) {
          sgemm(true, false, c1 - c0, hd, n - c0, 1.0f, P + c0 * n + c0, n, dO + c0 * hd, hd, 0.0f, dv + c0 * hd,
                hd);  // dv = P'^T·dO
          sgemm(false, false, c1 - c0, hd, c1, scale, dP + c0 * n, n, k, hd, 0.0f, dq + c0 * hd,
                hd);  // dq = dS·k·scale (query rows [c0, c1))
          sgemm(true, false, c1 - c0, hd, n - c0, 1.0f, dP + c0 * n + c0, n, q + c0 * hd, hd, 0.0f, dk + c0 * hd,
                hd);  // dk = dS^T·(q·scale)
        });
        A* dbase = dx + (b * T + s0) * 3 * C + h * hd;
        scatter_head(dbase, dq, n, hd, 3 * C);
        scatter_head(dbase + C, dk, n, hd, 3 * C);
        scatter_head(dbase + 2 * C, dv, n, hd, 3 * C);
      });
    }
  });
}

}  // namespace strata::cpu
