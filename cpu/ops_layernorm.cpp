// LayerNorm forward/backward over the last dimension (statistics in f32).
#include <cmath>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/ops.h"
#include "cpu/row_partials.h"

namespace strata::cpu {

void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                       TensorView bias) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C;
  expect_numel(out, N * C, "layernorm_forward", "out");
  expect_numel(mean, N, "layernorm_forward", "mean");
  expect_numel(rstd, N, "layernorm_forward", "rstd");
  float* mu = mean.as<float>();
  float* rs = rstd.as<float>();
  dispatch_act(out.dtype, [&]<typename T>(T) {
    T* y = out.as<T>();
    const T* x = inp.as<T>();
    const T* w = weight.as<T>();
    const T* b = bias.as<T>();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* xr = x + n * C;
      float m = 0;
      for (int64_t c = 0; c < C; ++c) m += to_f32(xr[c]);
      m /= float(C);
      float v = 0;
      for (int64_t c = 0; c < C; ++c) {
        const float d = to_f32(xr[c]) - m;
        v += d * d;
      }
      const float r = 1.0f / std::sqrt(v / float(C) + 1e-5f);
      T* yr = y + n * C;
      for (int64_t c = 0; c < C; ++c) yr[c] = from_f32<T>((to_f32(xr[c]) - m) * r * to_f32(w[c]) + to_f32(b[c]));
      mu[n] = m;
      rs[n] = r;
    }
  });
}

void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                        TensorView weight, TensorView mean, TensorView rstd, Workspace& ws) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C;
  expect_numel(dinp, N * C, "layernorm_backward", "dinp");
  expect_numel(dout, N * C, "layernorm_backward", "dout");
  float* dw = dweight.as<float>();
  float* db = dbias.as<float>();
  const float* mu = mean.as<float>();
  const float* rs = rstd.as<float>();
  dispatch_act(dinp.dtype, [&]<typename T>(T) {
    T* dx = dinp.as<T>();
    const T* x = inp.as<T>();
    const T* w = weight.as<T>();
    const T* dy = dout.as<T>();
    // Per-thread partial sums for dweight (partial[0, C)) and dbias ([C, 2C)).
    auto row = [&](int64_t n, float* pdw) {
      float* pdb = pdw + C;
      const T* xr = x + n * C;
      const T* dyr = dy + n * C;
      T* dxr = dx + n * C;
      const float m = mu[n], r = rs[n];
      float dnorm_mean = 0, dnorm_norm_mean = 0;
      for (int64_t c = 0; c < C; ++c) {
        const float norm = (to_f32(xr[c]) - m) * r;
        const float dnorm = to_f32(w[c]) * to_f32(dyr[c]);
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
      }
      dnorm_mean /= float(C);
      dnorm_norm_mean /= float(C);
      for (int64_t c = 0; c < C; ++c) {
        const float norm = (to_f32(xr[c]) - m) * r;
        const float g = to_f32(dyr[c]);
        pdb[c] += g;
        pdw[c] += norm * g;
        const float dnorm = to_f32(w[c]) * g;
        dxr[c] = from_f32<T>(to_f32(dxr[c]) + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * r);
      }
    };
    rows_with_partials(N, 2 * C, ws, row, [&](const float* p) {
      for (int64_t c = 0; c < C; ++c) {
        dw[c] += p[c];
        db[c] += p[C + c];
      }
    });
  });
}

}  // namespace strata::cpu
