// The Llama-family ops on the CPU (contracts in src/backend/backend.h): RMSNorm, rotary
// position embeddings (Hugging Face's rotate-half convention, so imported q/k weights need no
// permutation), grouped-query key/value expansion around the fused attention, and SwiGLU.
// Statistics and every reduction are f32; activations f32, bf16 or f16.
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "cpu/ops.h"
#include "cpu/row_kernels.h"
#include "cpu/row_partials.h"
#include "host/simd.h"
#include "kernels/math/qk_norm_math.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace strata::cpu {

void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                     float weight_offset) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C;
  expect_numel(out, N * C, "rmsnorm_forward", "out");
  expect_numel(rstd, N, "rmsnorm_forward", "rstd");
  expect_numel(weight, C, "rmsnorm_forward", "weight");
  float* rs = rstd.as<float>();
  dispatch_act(out.dtype, [&]<typename T>(T) {
    T* y = out.as<T>();
    const T* x = inp.as<T>();
    const T* w = weight.as<T>();
    const auto k = norm_rows<T>().rmsnorm_forward;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) k(y + n * C, x + n * C, w, weight_offset, C, eps, rs + n);
  });
}

void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                      TensorView rstd, Workspace& ws, float weight_offset) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C;
  expect_numel(dinp, N * C, "rmsnorm_backward", "dinp");
  expect_numel(dout, N * C, "rmsnorm_backward", "dout");
  expect_dtype(dweight, DType::f32, "rmsnorm_backward", "dweight");
  const float* rs = rstd.as<float>();
  float* dw = dweight.as<float>();
  dispatch_act(dinp.dtype, [&]<typename T>(T) {
    T* dx = dinp.as<T>();
    const T* x = inp.as<T>();
    const T* w = weight.as<T>();
    const T* dy = dout.as<T>();
    rows_with_partials(
        N, C, ws,
        [&, k = norm_rows<T>().rmsnorm_backward](int64_t n, float* pdw) {
          k(dx + n * C, dy + n * C, x + n * C, w, weight_offset, rs[n], C, pdw, true);
        },
        [&](const float* p) {
          for (int64_t c = 0; c < C; ++c) dw[c] += p[c];
        });
  });
}

void qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight, int n_head,
                        int n_kv_head, int head_dim, float eps, const QkNormSpec& spec) {
  const kernel_math::QkNormGroups q = kernel_math::qk_norm_groups(n_head, n_kv_head, head_dim, spec);
  const int64_t W = q.row_width(), N = inp.numel() / W, G = q.count(), v0 = int64_t(n_head + n_kv_head) * head_dim;
  expect_numel(inp, N * W, "qk_rmsnorm_forward", "inp");
  expect_numel(out, N * W, "qk_rmsnorm_forward", "out");
  expect_numel(rstd, N * G, "qk_rmsnorm_forward", "rstd");
  expect_numel(qk_weight, q.weights(), "qk_rmsnorm_forward", "qk_weight");
  float* rs = rstd.as<float>();
  dispatch_act(out.dtype, [&]<typename T>(T) {
    T* y = out.as<T>();
    const T* x = inp.as<T>();
    const T* qw = qk_weight.as<T>();
    const auto k = norm_rows<T>().rmsnorm_forward;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      for (int g = 0; g < G; ++g)  // the q groups, then the k groups
        k(y + n * W + q.column(g), x + n * W + q.column(g), qw + q.weight_at(g), spec.weight_offset, q.width(g), eps,
          rs + n * G + g);
      if (y != x) std::memcpy(y + n * W + v0, x + n * W + v0, size_t(W - v0) * sizeof(T));  // v
    }
  });
}

void qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp, TensorView qk_weight,
                         TensorView rstd, int n_head, int n_kv_head, int head_dim, Workspace& ws,
                         const QkNormSpec& spec) {
  const kernel_math::QkNormGroups q = kernel_math::qk_norm_groups(n_head, n_kv_head, head_dim, spec);
  const int64_t W = q.row_width(), N = inp.numel() / W, G = q.count(), Wt = q.weights();
  expect_numel(dfused, N * W, "qk_rmsnorm_backward", "dfused");
  expect_numel(rstd, N * G, "qk_rmsnorm_backward", "rstd");
  expect_dtype(dqk_weight, DType::f32, "qk_rmsnorm_backward", "dqk_weight");
  expect_numel(dqk_weight, Wt, "qk_rmsnorm_backward", "dqk_weight");
  const float* rs = rstd.as<float>();
  float* dw = dqk_weight.as<float>();
  dispatch_act(dfused.dtype, [&]<typename T>(T) {
    T* g = dfused.as<T>();
    const T* x = inp.as<T>();
    const T* qw = qk_weight.as<T>();
    // Each group's weight gradient at its weights' place in the partial row; dy becomes dx in place.
    rows_with_partials(
        N, Wt, ws,
        [&, k = norm_rows<T>().rmsnorm_backward](int64_t n, float* pdw) {
          for (int64_t h = 0; h < G; ++h) {
            const int64_t wo = q.weight_at(int(h)), at = n * W + q.column(int(h));
            k(g + at, g + at, x + at, qw + wo, spec.weight_offset, rs[n * G + h], q.width(int(h)), pdw + wo, false);
          }
        },
        [&](const float* p) {
          for (int64_t c = 0; c < Wt; ++c) dw[c] += p[c];
        });
  });
}

// The angles' cosines and sines for every (t, i), as Hugging Face computes them (inverse
// frequencies in f32, t·inv_freq in f32), computed once per (T, head_dim, rope) and kept:
// the step allocates nothing and recomputes nothing.
static const float* rope_table(int64_t T, int head_dim, const RopeSpec& rope) {
  struct Table {
    int64_t T;
    int head_dim;
    RopeSpec rope;
    std::vector<float> cs;
  };
  static std::mutex mu;
  static std::vector<std::unique_ptr<Table>> tables;
  std::lock_guard lock(mu);
  for (const auto& t : tables)
    if (t->T == T && t->head_dim == head_dim && t->rope == rope) return t->cs.data();
  const int half = head_dim / 2;
  auto t = std::make_unique<Table>(Table{T, head_dim, rope, std::vector<float>(size_t(T) * size_t(half) * 2)});
  // Per position p: the half angles' cosines, then their sines (head_dim floats), so that
  // rope's vectors load each directly.
  for (int i = 0; i < half; ++i) {
    const float inv_freq = kernel_math::rope_inv_freq(i, head_dim, rope);
    for (int64_t p = 0; p < T; ++p) {
      const float a = float(p) * inv_freq;
      t->cs[size_t(p * head_dim + i)] = std::cos(a);
      t->cs[size_t(p * head_dim + half + i)] = std::sin(a);
    }
  }
  tables.push_back(std::move(t));
  return tables.back()->cs.data();
}

void rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& rope, bool inverse,
          std::span<const int32_t> positions) {
  // x [B, T, W]: heads [first_head, first_head + heads) of width head_dim each, rotated in
  // place by position t (the token's packed-row position when given): (x_i, x_{i+r/2}) by
  // angle t·inv_freq_i for the r rotary dims (inverse: by minus it, the forward's backward).
  const int64_t T = x.shape[x.shape.rank - 2], W = x.shape[x.shape.rank - 1], BT = x.numel() / W;
  STRATA_CHECK(head_dim % 2 == 0 && int64_t(first_head + heads) * head_dim <= W,
               "rope: heads [" + std::to_string(first_head) + ", +" + std::to_string(heads) + ") of " +
                   std::to_string(head_dim) + " in a row of " + std::to_string(W),
               "this is a bug in the model");
  const int rot = kernel_math::rope_dims(rope, head_dim), half = rot / 2;  // the dims past rot stay
  STRATA_CHECK(rot % 2 == 0 && rot <= head_dim,
               "rope: " + std::to_string(rot) + " rotary dims of a head of " + std::to_string(head_dim),
               "the rotary dims must be even and at most the head size");
  check_positions(positions, BT / T, T, "rope");
  const float* cs = rope_table(T, rot, rope);
  const float sign = inverse ? -1.0f : 1.0f;
  const __m256 vsign = _mm256_set1_ps(sign);
  dispatch_act(x.dtype, [&]<typename T_>(T_) {
    T_* p = x.as<T_>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < BT; ++n) {
      const int64_t t = positions.empty() ? n % T : positions[size_t(n)];
      const float *cos_t = cs + t * rot, *sin_t = cos_t + half;
      for (int h = first_head; h < first_head + heads; ++h) {
        T_* v = p + n * W + int64_t(h) * head_dim;
        int i = 0;
        for (; i + 8 <= half; i += 8) {
          const __m256 c = _mm256_loadu_ps(cos_t + i), s = _mm256_mul_ps(vsign, _mm256_loadu_ps(sin_t + i));
          const __m256 a = simd::load8(v + i), b = simd::load8(v + i + half);
          simd::store8(v + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
          simd::store8(v + i + half, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
        }
        for (; i < half; ++i) {  // the same arithmetic
          const float c = cos_t[i], s = sign * sin_t[i], a = to_f32(v[i]), b = to_f32(v[i + half]);
          v[i] = from_f32<T_>(std::fma(a, c, -(b * s)));
          v[i + half] = from_f32<T_>(std::fma(b, c, a * s));
        }
      }
    }
  });
}

void gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) {
  // fused [N, (NH + 2·NKV)·d] = q | k | v  ->  packed [N, 3·NH·d] with kv head j serving query
  // heads [j·g, (j+1)·g), g = NH / NKV (Hugging Face's repeat_kv).
  const int64_t Wf = int64_t(n_head + 2 * n_kv_head) * head_dim, Wp = int64_t(3 * n_head) * head_dim;
  const int64_t N = fused.numel() / Wf, g = n_head / n_kv_head, d = head_dim;
  expect_numel(packed, N * Wp, "gqa_expand", "packed");
  const size_t esz = dtype_size(packed.dtype);
  const char* src = static_cast<const char*>(fused.data);
  char* dst = static_cast<char*>(packed.data);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const char* f = src + size_t(n * Wf) * esz;
    char* o = dst + size_t(n * Wp) * esz;
    std::memcpy(o, f, size_t(n_head * d) * esz);  // q
    for (int part = 1; part <= 2; ++part)         // k, v
      for (int h = 0; h < n_head; ++h)
        std::memcpy(o + size_t(part * n_head * d + h * d) * esz,
                    f + size_t(n_head * d + (part - 1) * n_kv_head * d + (h / g) * d) * esz, size_t(d) * esz);
  }
}

void gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) {
  // The backward of gqa_expand: dq copied, each kv head's gradient summed over its g query
  // heads (in f32, in head order).
  const int64_t Wf = int64_t(n_head + 2 * n_kv_head) * head_dim, Wp = int64_t(3 * n_head) * head_dim;
  const int64_t N = dfused.numel() / Wf, g = n_head / n_kv_head, d = head_dim;
  expect_numel(dpacked, N * Wp, "gqa_reduce", "dpacked");
  dispatch_act(dfused.dtype, [&]<typename T>(T) {
    T* df = dfused.as<T>();
    const T* dp = dpacked.as<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      T* f = df + n * Wf;
      const T* p = dp + n * Wp;
      std::memcpy(f, p, size_t(n_head * d) * sizeof(T));
      for (int part = 1; part <= 2; ++part)
        for (int j = 0; j < n_kv_head; ++j) {
          const T* src = p + part * n_head * d + j * g * d;  // query heads j·g .. j·g + g − 1
          T* dst = f + n_head * d + (part - 1) * n_kv_head * d + j * d;
          int64_t i = 0;
          for (; i + 8 <= d; i += 8) {
            __m256 s = _mm256_setzero_ps();
            for (int64_t r = 0; r < g; ++r) s = _mm256_add_ps(s, simd::load8(src + r * d + i));
            simd::store8(dst + i, s);
          }
          for (; i < d; ++i) {  // the same sums
            float s = 0;
            for (int64_t r = 0; r < g; ++r) s += to_f32(src[r * d + i]);
            dst[i] = from_f32<T>(s);
          }
        }
    }
  });
}

void swiglu_forward(TensorView out, TensorView gate_up, GatedAct act) {
  // gate_up [N, 2I] = gate | up  ->  out [N, I] = act(gate) · up
  const int64_t I = last_dim(out), N = out.numel() / I;
  expect_numel(gate_up, 2 * N * I, "swiglu_forward", "gate_up");
  dispatch_act(out.dtype, [&]<typename T>(T) {
    T* const y = out.as<T>();
    const T* const gu = gate_up.as<T>();
    const auto f = act == GatedAct::silu ? act_rows<T>().swiglu_forward : act_rows<T>().geglu_forward;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) f(y + n * I, gu + n * 2 * I, gu + n * 2 * I + I, I);
  });
}

void swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout, GatedAct act) {
  const int64_t I = last_dim(dout), N = dout.numel() / I;
  expect_numel(gate_up, 2 * N * I, "swiglu_backward", "gate_up");
  expect_numel(dgate_up, 2 * N * I, "swiglu_backward", "dgate_up");
  dispatch_act(dout.dtype, [&]<typename T>(T) {
    T* const d = dgate_up.as<T>();
    const T* const gu = gate_up.as<T>();
    const T* const dy = dout.as<T>();
    const auto f = act == GatedAct::silu ? act_rows<T>().swiglu_backward : act_rows<T>().geglu_backward;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      f(d + n * 2 * I, d + n * 2 * I + I, gu + n * 2 * I, gu + n * 2 * I + I, dy + n * I, I);
  });
}

}  // namespace strata::cpu
