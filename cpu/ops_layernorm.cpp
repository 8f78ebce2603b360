// LayerNorm forward/backward over the last dimension (statistics in f32), row by row on the
// CPU's widest row kernels (cpu/row_kernels.h).
#include <cmath>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/ops.h"
#include "cpu/row_kernels.h"
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
    const auto k = norm_rows<T>().layernorm_forward;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) k(y + n * C, x + n * C, w, b, C, mu + n, rs + n);
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
    auto row = [&, k = norm_rows<T>().layernorm_backward](int64_t n, float* pdw) {
      k(dx + n * C, pdw, pdw + C, dy + n * C, x + n * C, w, mu[n], rs[n], C);
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
