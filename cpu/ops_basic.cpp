// Embedding, GELU, residual, dropout, casts, norms and the fused softmax cross-entropy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/ops.h"
#include "cpu/row_kernels.h"
#include "host/convert.h"
#include "kernels/math/element_math.h"

namespace strata::cpu {

// The position of token n: its packed-row position, or its row index t.
static int64_t position_of(int64_t n, int64_t T, std::span<const int32_t> positions) {
  return positions.empty() ? n % T : positions[size_t(n)];
}

void encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                     std::span<const int32_t> positions) {
  const int64_t C = last_dim(out), N = int64_t(tokens.size()), T = out.shape[out.shape.rank - 2];
  check_positions(positions, N / T, T, "encoder_forward");
  // wpe may be empty (Llama: positions come from rotary embeddings instead).
  const int64_t V = wte.shape[0], maxT = wpe.data ? wpe.shape[0] : T;
  expect_numel(out, N * C, "encoder_forward", "out");
  STRATA_CHECK(T <= maxT,
               "sequence length " + std::to_string(T) + " exceeds the model's context " + std::to_string(maxT),
               "lower --seq-len or use a model with a longer context");
  // Validate before the parallel loop: an exception must not leave an OpenMP region.
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tok = tokens[size_t(n)];
    STRATA_CHECK(tok >= 0 && tok < V,
                 "token id " + std::to_string(tok) + " at position " + std::to_string(n) +
                     " is outside the vocabulary of " + std::to_string(V),
                 "the data was tokenized for a different vocabulary: check --data and --model");
  }
  dispatch_act(out.dtype, [&]<typename T_>(T_) {
    T_* o = out.as<T_>();
    const T_* te = wte.as<T_>();
    const T_* pe = wpe.data ? wpe.as<T_>() : nullptr;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const int32_t tok = tokens[size_t(n)];
      const T_* a = te + tok * C;
      T_* y = o + n * C;
      if (!pe) {
        std::memcpy(y, a, size_t(C) * sizeof(T_));
        continue;
      }
      const T_* b = pe + position_of(n, T, positions) * C;
      for (int64_t c = 0; c < C; ++c) y[c] = from_f32<T_>(to_f32(a[c]) + to_f32(b[c]));
    }
  });
}

void encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens,
                      std::span<const int32_t> positions) {
  const int64_t C = last_dim(dout), N = int64_t(tokens.size()), T = dout.shape[dout.shape.rank - 2];
  check_positions(positions, N / T, T, "encoder_backward");
  float* dte = dwte.as<float>();
  float* dpe = dwpe.as<float>();
  dispatch_act(dout.dtype, [&]<typename T_>(T_) {
    const T_* d = dout.as<T_>();
    // Each thread owns a slice of channels, so repeated tokens never race.
#pragma omp parallel
    {
      int nt = 1, id = 0;
#ifdef _OPENMP
      nt = omp_get_num_threads(), id = omp_get_thread_num();
#endif
      const int64_t c0 = C * id / nt, c1 = C * (id + 1) / nt;
      for (int64_t n = 0; n < N; ++n) {
        const T_* g = d + n * C;
        float* te = dte + int64_t(tokens[size_t(n)]) * C;
        if (!dpe) {
          for (int64_t c = c0; c < c1; ++c) te[c] += to_f32(g[c]);
          continue;
        }
        float* pe = dpe + position_of(n, T, positions) * C;
        for (int64_t c = c0; c < c1; ++c) {
          const float v = to_f32(g[c]);
          te[c] += v;
          pe[c] += v;
        }
      }
    }
  });
}

// Elementwise work in chunks so OpenMP threads each own contiguous, vector-aligned ranges.
template <typename F>
static void parallel_chunks(int64_t n, F&& f) {
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) f(c * kChunk, std::min(kChunk, n - c * kChunk));
}

void gelu_forward(TensorView out, TensorView inp) {
  const int64_t n = inp.numel();
  expect_numel(out, n, "gelu_forward", "out");
  dispatch_act(out.dtype, [&]<typename T_>(T_) {
    T_* y = out.as<T_>();
    const T_* x = inp.as<T_>();
    const auto f = act_rows<T_>().gelu_forward;
    parallel_chunks(n, [&](int64_t off, int64_t len) { f(y + off, x + off, len); });
  });
}

void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  const int64_t n = inp.numel();
  expect_numel(dinp, n, "gelu_backward", "dinp");
  expect_numel(dout, n, "gelu_backward", "dout");
  dispatch_act(dinp.dtype, [&]<typename T_>(T_) {
    T_* dx = dinp.as<T_>();
    const T_* x = inp.as<T_>();
    const T_* dy = dout.as<T_>();
    const auto f = act_rows<T_>().gelu_backward;  // dinp may alias dout
    parallel_chunks(n, [&](int64_t off, int64_t len) { f(dx + off, x + off, dy + off, len); });
  });
}

void residual_forward(TensorView out, TensorView a, TensorView b) {
  const int64_t n = out.numel();
  expect_numel(a, n, "residual_forward", "a");
  expect_numel(b, n, "residual_forward", "b");
  dispatch_act(out.dtype, [&]<typename T_>(T_) {
    T_* y = out.as<T_>();
    const T_* x1 = a.as<T_>();
    const T_* x2 = b.as<T_>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T_>(to_f32(x1[i]) + to_f32(x2[i]));
  });
}

void scale(TensorView x, float alpha) {
  const int64_t n = x.numel();
  dispatch_act(x.dtype, [&]<typename T_>(T_) {
    T_* y = x.as<T_>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = from_f32<T_>(to_f32(y[i]) * alpha);
  });
}

void add_columns(TensorView y, TensorView x, int64_t first, float alpha) {
  const auto [N, w, W] = check_columns(y, x, first, "add_columns");
  dispatch_act(y.dtype, [&]<typename T_>(T_) {
    T_* yp = y.as<T_>();
    const T_* xp = x.as<T_>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < w; ++j) {
        T_& o = yp[n * W + first + j];
        o = from_f32<T_>(kernel_math::scaled_add(to_f32(o), to_f32(xp[n * w + j]), alpha));
      }
  });
}

void take_columns(TensorView x, TensorView y, int64_t first, float alpha) {
  const auto [N, w, W] = check_columns(y, x, first, "take_columns");
  dispatch_act(y.dtype, [&]<typename T_>(T_) {
    const T_* yp = y.as<T_>();
    T_* xp = x.as<T_>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < w; ++j) xp[n * w + j] = from_f32<T_>(to_f32(yp[n * W + first + j]) * alpha);
  });
}

void dropout(TensorView x, const DropoutSpec& drop) {
  if (!drop.active()) return;
  STRATA_CHECK(x.shape.rank >= 2, "dropout: x has shape " + x.shape.str() + ", expected [B, T, W]",
               "this is a bug in the caller");
  const int64_t W = last_dim(x), T = x.shape.rank >= 3 ? x.shape[x.shape.rank - 2] : 1, N = x.numel() / W;
  dispatch_act(x.dtype, [&]<typename T_>(T_) {
    T_* p = x.as<T_>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < W; ++c) {
        const float m = kernel_math::dropout_mult(drop, kernel_math::dropout_index(drop, n / T, n % T, c, T, W));
        p[n * W + c] = from_f32<T_>(to_f32(p[n * W + c]) * m);
      }
  });
}

void cast(TensorView dst, TensorView src) {
  expect_numel(dst, src.numel(), "cast", "dst");
  host::convert_parallel(dst.data, dst.dtype, src.data, src.dtype, size_t(src.numel()));
}

namespace {
// One row's loss and gradient of the soft-capped logits (Gemma-2), the cap recomputed from
// the raw logit in each pass (it stays until its gradient overwrites it), in the kernels'
// element math.
double softcap_ce_row(float* row, int vocab, int32_t t, float dloss, float cap) {
  float mx = -INFINITY;
  for (int v = 0; v < vocab; ++v) mx = std::max(mx, kernel_math::softcapped(row[v], cap));
  double s = 0;
  for (int v = 0; v < vocab; ++v) s += double(std::exp(kernel_math::softcapped(row[v], cap) - mx));
  const double loss = kernel_math::cross_entropy_loss(mx, s, kernel_math::softcapped(row[t], cap));
  for (int v = 0; v < vocab; ++v) {
    const float c = kernel_math::softcapped(row[v], cap);
    row[v] = kernel_math::cross_entropy_grad(c, mx, s, dloss, v == t) * kernel_math::softcap_grad(c, cap);
  }
  return loss;
}
}  // namespace

double cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets, int vocab,
                                      float dloss, float softcap) {
  const int64_t Vp = last_dim(logits), N = int64_t(targets.size());
  expect_dtype(logits, DType::f32, "cross_entropy", "logits");
  expect_numel(logits, N * Vp, "cross_entropy", "logits");
  expect_numel(losses, N, "cross_entropy", "losses");
  float* lg = logits.as<float>();
  float* ls = losses.as<float>();
  for (int64_t n = 0; n < N; ++n)
    STRATA_CHECK(targets[size_t(n)] < vocab,
                 "target id " + std::to_string(targets[size_t(n)]) + " at position " + std::to_string(n) +
                     " is outside the vocabulary of " + std::to_string(vocab),
                 "the data was tokenized for a different vocabulary: check --data and --model");
  double total = 0;
  const SoftmaxCeRow ce_row = softmax_ce_row(ops_isa());
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* row = lg + n * Vp;
    const int32_t t = targets[size_t(n)];
    if (t < 0) {  // masked position: contributes nothing
      ls[n] = 0;
      for (int64_t v = 0; v < Vp; ++v) row[v] = 0;
      continue;
    }
    const double loss = softcap > 0 ? softcap_ce_row(row, vocab, t, dloss, softcap) : ce_row(row, vocab, t, dloss);
    ls[n] = float(loss);
    total += loss;
    for (int64_t v = vocab; v < Vp; ++v) row[v] = 0;
  }
  return total;
}

}  // namespace strata::cpu
