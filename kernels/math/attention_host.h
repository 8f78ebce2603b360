// Serial host drivers of the causal attention kernels (kernels/attention.cu): the same
// tiles, the same attention_math.h calls in the same order, with loops where the kernels
// use lanes and warp reductions. CI has no GPU, so these are what
// tests/test_kernel_math_attention.cpp holds to the CPU backend's reference. f32 only:
// the kernels convert bf16/f16 to f32 on load and round once on store.
//
// Layouts as the op's: qkv [B,T,3C] (q|k|v, head h at columns h·hd of each), out and
// dout [B,T,C], lse f32 [B,NH,T]; dqkv [B,T,3C] is overwritten.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/math/attention_math.h"

namespace strata::kernel_math {

namespace attention_detail {

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// One (batch, head) of the op: row t of q, k, v, out, dout and dq, dk, dv.
struct Head {
  const float* qkv;
  int64_t stride;  // 3C
  int64_t C;
  const float* q(int t) const { return qkv + t * stride; }
  const float* k(int t) const { return qkv + t * stride + C; }
  const float* v(int t) const { return qkv + t * stride + 2 * C; }
};

}  // namespace attention_detail

// `rec`: packed rows (host arrays here, as AttnRecords documents).
inline void attention_forward_host(float* out, float* lse, const float* qkv, int B, int T, int NH, int hd,
                                   const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                                   const AttnRecords& rec = {}) {
  using attention_detail::dot;
  const int64_t C = int64_t(NH) * hd;
  const float scale = attn_scale(hd, spec);
  const int window = spec.window;
  const size_t n = static_cast<size_t>(hd);
  std::vector<float> q(n), acc(n), s(kAttnTile), p(kAttnTile);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const attention_detail::Head x{qkv + int64_t(b) * T * 3 * C + int64_t(h) * hd, 3 * C, C};
      for (int i = 0; i < T; ++i) {
        for (int d = 0; d < hd; ++d) q[size_t(d)] = x.q(i)[d] * scale;
        SoftmaxState st = softmax_init();
        std::fill(acc.begin(), acc.end(), 0.0f);
        const int first = attn_record_first(rec, b, T, i);
        for (int t = std::max(attn_first_key_tile(i, window), first / kAttnTile); t <= i / kAttnTile; ++t) {
          float tile_max = -INFINITY;
          for (int jj = 0; jj < kAttnTile; ++jj) {
            const int j = t * kAttnTile + jj;
            const float sc = j < T ? dot(q.data(), x.k(j), hd) : 0.0f;  // the kernel zero-fills keys ≥ T
            s[size_t(jj)] = attn_masked_score(attn_capped_score(sc, spec.softcap), attn_visible(i, j, window, first));
            tile_max = std::max(tile_max, s[size_t(jj)]);
          }
          const float alpha = softmax_rescale(st, tile_max);
          float tile_sum = 0.0f;
          for (int jj = 0; jj < kAttnTile; ++jj) tile_sum += p[size_t(jj)] = softmax_weight(s[size_t(jj)], st);
          softmax_accumulate(st, tile_sum);
          if (drop.active())  // after the sum: the softmax's denominator is the undropped one
            for (int jj = 0; jj < kAttnTile; ++jj)
              p[size_t(jj)] *= dropout_mult(drop, attn_dropout_index(drop, b, h, i, t * kAttnTile + jj, NH, T));
          for (auto& a : acc) a *= alpha;
          for (int jj = 0; jj < kAttnTile && t * kAttnTile + jj < T; ++jj)
            for (int d = 0; d < hd; ++d) acc[size_t(d)] += p[size_t(jj)] * x.v(t * kAttnTile + jj)[d];
        }
        const float inv = softmax_inv(st);
        float* o = out + (int64_t(b) * T + i) * C + int64_t(h) * hd;
        for (int d = 0; d < hd; ++d) o[d] = acc[size_t(d)] * inv;
        lse[(int64_t(b) * NH + h) * T + i] = softmax_lse(st);
      }
    }
}

inline void attention_backward_host(float* dqkv, const float* dout, const float* qkv, const float* out,
                                    const float* lse, int B, int T, int NH, int hd, const DropoutSpec& drop = {},
                                    const AttentionSpec& spec = {}, const AttnRecords& rec = {}) {
  using attention_detail::dot;
  const int64_t C = int64_t(NH) * hd;
  const float scale = attn_scale(hd, spec);
  const int window = spec.window;
  // Per head: the scaled q rows (the kernels stage them scaled) and D_i = Σ dout·out.
  const size_t n = static_cast<size_t>(hd);
  std::vector<float> qs(static_cast<size_t>(T) * n), D(static_cast<size_t>(T)), acc(n), acc2(n);
  std::vector<float> p(kAttnTile), ds(kAttnTile);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const attention_detail::Head x{qkv + int64_t(b) * T * 3 * C + int64_t(h) * hd, 3 * C, C};
      const float* dy = dout + int64_t(b) * T * C + int64_t(h) * hd;
      const float* y = out + int64_t(b) * T * C + int64_t(h) * hd;
      const float* L = lse + (int64_t(b) * NH + h) * T;
      float* dx = dqkv + int64_t(b) * T * 3 * C + int64_t(h) * hd;
      for (int i = 0; i < T; ++i) {
        for (int d = 0; d < hd; ++d) qs[size_t(i) * hd + d] = x.q(i)[d] * scale;
        D[size_t(i)] = dot(dy + int64_t(i) * C, y + int64_t(i) * C, hd);
      }
      // dq_i = scale · Σ_{j ≤ i} dS_ij k_j, key tiles in order from the row's first visible one
      // (the dq kernel; the tiles a kernel block's earlier rows add before it are all masked
      // for this row, and adding their zeros changes nothing).
      for (int i = 0; i < T; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        const int first = attn_record_first(rec, b, T, i);
        for (int t = std::max(attn_first_key_tile(i, window), first / kAttnTile); t <= i / kAttnTile; ++t) {
          for (int jj = 0; jj < kAttnTile; ++jj) {
            const int j = t * kAttnTile + jj;
            const float sc = attn_capped_score(j < T ? dot(&qs[size_t(i) * hd], x.k(j), hd) : 0.0f, spec.softcap);
            const float dp = j < T ? dot(dy + int64_t(i) * C, x.v(j), hd) : 0.0f;
            const float m = drop.active() ? dropout_mult(drop, attn_dropout_index(drop, b, h, i, j, NH, T)) : 1.0f;
            attn_grad_pair(sc, dp, L[i], D[size_t(i)], attn_visible(i, j, window, first), m, spec.softcap,
                           &p[size_t(jj)], &ds[size_t(jj)]);
          }
          for (int jj = 0; jj < kAttnTile && t * kAttnTile + jj < T; ++jj)
            for (int d = 0; d < hd; ++d) acc[size_t(d)] += ds[size_t(jj)] * x.k(t * kAttnTile + jj)[d];
        }
        for (int d = 0; d < hd; ++d) dx[int64_t(i) * 3 * C + d] = acc[size_t(d)] * scale;
      }
      // dk_j = Σ_{i ≥ j} dS_ij (q_i·scale), dv_j = Σ_{i ≥ j} P_ij dout_i, query tiles in
      // order from the one holding j (the dk/dv kernel).
      for (int j = 0; j < T; ++j) {
        std::fill(acc.begin(), acc.end(), 0.0f);    // dk
        std::fill(acc2.begin(), acc2.end(), 0.0f);  // dv
        const int last = std::min(attn_last_query_tile(j, window, T), attn_record_last(rec, b, T, j) / kAttnTile);
        for (int t = j / kAttnTile; t <= last; ++t) {
          for (int ii = 0; ii < kAttnTile; ++ii) {
            const int i = t * kAttnTile + ii;
            const bool in = i < T;  // the kernel zero-fills queries ≥ T and masks them
            const float sc = attn_capped_score(in ? dot(x.k(j), &qs[size_t(i) * hd], hd) : 0.0f, spec.softcap);
            const float dp = in ? dot(x.v(j), dy + int64_t(i) * C, hd) : 0.0f;
            const float m = drop.active() ? dropout_mult(drop, attn_dropout_index(drop, b, h, i, j, NH, T)) : 1.0f;
            const bool seen = in && attn_visible(i, j, window, attn_record_first(rec, b, T, i));
            attn_grad_pair(sc, dp, in ? L[i] : 0.0f, in ? D[size_t(i)] : 0.0f, seen, m, spec.softcap, &p[size_t(ii)],
                           &ds[size_t(ii)]);
          }
          for (int ii = 0; ii < kAttnTile && t * kAttnTile + ii < T; ++ii) {
            const int i = t * kAttnTile + ii;
            for (int d = 0; d < hd; ++d) {
              acc2[size_t(d)] += p[size_t(ii)] * dy[int64_t(i) * C + d];
              acc[size_t(d)] += ds[size_t(ii)] * qs[size_t(i) * hd + d];
            }
          }
        }
        for (int d = 0; d < hd; ++d) {
          dx[int64_t(j) * 3 * C + C + d] = acc[size_t(d)];
          dx[int64_t(j) * 3 * C + 2 * C + d] = acc2[size_t(d)];
        }
      }
    }
}

}  // namespace strata::kernel_math
