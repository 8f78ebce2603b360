// The CPU attention's row work (ops_attention.cpp): the causal softmax of one head's scores
// with its log-sum-exp, sliding window and dropout mask, and the softmax's backward. A head
// runs one record at a time (packed rows): rows and keys here count from the record's first
// row, and HeadDrop puts them back where the dropout mask is indexed.
#pragma once
#include <cmath>
#include <cstdint>

#include "host/simd.h"
#include "kernels/math/attention_math.h"
#include "kernels/math/dropout_math.h"

namespace strata::cpu {

// The first key row t sees: t - window + 1 under a sliding window of `window` keys, else 0.
inline int64_t first_visible_key(int64_t t, int64_t window) { return window > 0 && t >= window ? t - window + 1 : 0; }

// The dropout factors of one (batch, head) for a record that starts at row `first` of T.
struct HeadDrop {
  const DropoutSpec& drop;
  int64_t b, h, NH, T, first;
  bool active() const { return drop.active(); }
  float mult(int64_t t, int64_t j) const {
    return kernel_math::dropout_mult(drop, kernel_math::attn_dropout_index(drop, b, h, first + t, first + j, NH, T));
  }
};

// S [n,n] scores (row stride ld) → probabilities in place (zero outside keys
// [first_visible_key, t]), lse per row; a soft-cap > 0 caps the scores first; with dropout
// the kept probabilities are scaled after the softmax (lse is the undropped one's).
inline void causal_softmax_rows(float* S, int64_t ld, float* lse, int64_t n, const HeadDrop& drop, int64_t window = 0,
                                float softcap = 0.0f) {
  for (int64_t t = 0; t < n; ++t) {
    float* s = S + t * ld;
    const int64_t lo = first_visible_key(t, window);
    if (softcap > 0.0f)
      for (int64_t j = lo; j <= t; ++j) s[j] = kernel_math::attn_capped_score(s[j], softcap);
    const float mx = simd::row_max(s + lo, t + 1 - lo);
    const float sum = simd::exp_shift_sum(s + lo, t + 1 - lo, mx);
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < lo; ++j) s[j] = 0;
    for (int64_t j = lo; j <= t; ++j) s[j] *= inv;
    for (int64_t j = t + 1; j < n; ++j) s[j] = 0;
    lse[t] = mx + std::log(sum);
    if (drop.active())
      for (int64_t j = lo; j <= t; ++j) s[j] *= drop.mult(t, j);
  }
}

// Row t of the softmax's backward: ds = P ∘ (dP' − D) with D = Σ dO·O, P' = P·m under
// dropout (dP = dP'·m, and P becomes P' for dv), zero outside keys [first_visible_key, t].
inline void softmax_backward_row(float* ds, float* p, float D, int64_t t, int64_t n, const HeadDrop& drop,
                                 int64_t window = 0) {
  const int64_t lo = first_visible_key(t, window);
  if (drop.active()) {
    for (int64_t j = lo; j <= t; ++j) {
      const float m = drop.mult(t, j);
      ds[j] = p[j] * (ds[j] * m - D);
      p[j] *= m;
    }
  } else {
    for (int64_t j = lo; j <= t; ++j) ds[j] = p[j] * (ds[j] - D);
  }
  for (int64_t j = 0; j < lo; ++j) ds[j] = 0;
  for (int64_t j = t + 1; j < n; ++j) ds[j] = 0;
}

// Row t of the backward under a soft-cap, from the raw scores s (scaled q·k): P = exp(capped
// − lse) into s, and ds = P ∘ (dP'·m − D) ∘ (1 − tanh²) in place of dP', as
// softmax_backward_row otherwise.
inline void softcap_backward_row(float* ds, float* s, float lse, float D, int64_t t, int64_t n, const HeadDrop& drop,
                                 int64_t window, float softcap) {
  const int64_t lo = first_visible_key(t, window);
  for (int64_t j = lo; j <= t; ++j) {
    const float m = drop.active() ? drop.mult(t, j) : 1.0f;
    float p, g;
    kernel_math::attn_grad_pair(kernel_math::attn_capped_score(s[j], softcap), ds[j], lse, D, true, m, softcap, &p, &g);
    ds[j] = g;
    s[j] = p;
  }
  for (int64_t j = 0; j < lo; ++j) ds[j] = s[j] = 0;
  for (int64_t j = t + 1; j < n; ++j) ds[j] = s[j] = 0;
}

}  // namespace strata::cpu
