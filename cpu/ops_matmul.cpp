// Linear layers: out = inp · W^T + b and its backward, on top of cpu::gemm.
#include "cpu/convert.h"
#include "cpu/gemm.h"
#include "cpu/ops.h"

namespace strata::cpu {

void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias, Workspace& ws) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C, OC = weight.shape[0];
  expect_numel(weight, OC * C, "matmul_forward", "weight");
  expect_numel(out, N * OC, "matmul_forward", "out");
  // 16-bit operands on a CPU that computes in them: the product, the bias and the rounding
  // in one oneDNN pass, straight into out.
  if (inp.dtype != DType::f32 && (out.dtype == DType::f32 || out.dtype == inp.dtype) &&
      (bias.empty() || bias.dtype == weight.dtype) &&
      gemm_native(N, OC, C, 1.0f, {inp.data, inp.dtype, C, false}, {weight.data, weight.dtype, C, true}, 0.0f,
                  LowpOut{out.data, out.dtype, OC, bias.empty() ? nullptr : bias.data, bias.dtype}, ws))
    return;
  // Accumulate in f32: directly into out when it is f32, else into scratch then convert.
  float* acc = out.dtype == DType::f32 ? out.as<float>() : ws.get<float>(Scratch::gemm_c, size_t(N * OC));
  gemm(N, OC, C, 1.0f, {inp.data, inp.dtype, C, false}, {weight.data, weight.dtype, C, true}, 0.0f, acc, OC, ws);
  const bool has_bias = !bias.empty();
  dispatch_act(out.dtype == DType::f32 ? weight.dtype : out.dtype, [&]<typename W>(W) {
    const W* b = has_bias ? bias.as<W>() : nullptr;
    if (out.dtype == DType::f32) {
      if (!b) return;
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) acc[n * OC + o] += to_f32(b[o]);
    } else {
      W* y = out.as<W>();
#pragma omp parallel for schedule(static)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < OC; ++o) y[n * OC + o] = from_f32<W>(acc[n * OC + o] + (b ? to_f32(b[o]) : 0.0f));
    }
  });
}

void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                     TensorView weight, Workspace& ws) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C, OC = weight.shape[0];
  expect_numel(dout, N * OC, "matmul_backward", "dout");
  expect_numel(dweight, OC * C, "matmul_backward", "dweight");
  expect_dtype(dweight, DType::f32, "matmul_backward", "dweight");
  // dinp[N,C] = dout[N,OC] · W[OC,C]
  if (!dinp.empty()) {
    expect_numel(dinp, N * C, "matmul_backward", "dinp");
    // 16-bit: straight into dinp, rounded once (as below, without the f32 pass).
    const bool direct = dinp.dtype == dout.dtype && dout.dtype != DType::f32 &&
                        gemm_native(N, C, OC, 1.0f, {dout.data, dout.dtype, OC, false},
                                    {weight.data, weight.dtype, C, false}, 0.0f, LowpOut{dinp.data, dinp.dtype, C}, ws);
    if (!direct) {
      float* acc = dinp.dtype == DType::f32 ? dinp.as<float>() : ws.get<float>(Scratch::gemm_c, size_t(N * C));
      gemm(N, C, OC, 1.0f, {dout.data, dout.dtype, OC, false}, {weight.data, weight.dtype, C, false}, 0.0f, acc, C, ws);
      if (dinp.dtype != DType::f32) convert_parallel(dinp.data, dinp.dtype, acc, DType::f32, size_t(N * C));
    }
  }
  // dW[OC,C] += dout^T[OC,N] · inp[N,C]
  gemm(OC, C, N, 1.0f, {dout.data, dout.dtype, OC, true}, {inp.data, inp.dtype, C, false}, 1.0f, dweight.as<float>(), C,
       ws);
  if (!dbias.empty()) {
    float* db = dbias.as<float>();
    dispatch_act(dout.dtype, [&]<typename T>(T) {
      const T* g = dout.as<T>();
      // Column sums: each thread owns a block of output channels.
#pragma omp parallel for schedule(static)
      for (int64_t o0 = 0; o0 < OC; o0 += 64) {
        const int64_t o1 = std::min(OC, o0 + 64);
        float s[64] = {};
        for (int64_t n = 0; n < N; ++n)
          for (int64_t o = o0; o < o1; ++o) s[o - o0] += to_f32(g[n * OC + o]);
        for (int64_t o = o0; o < o1; ++o) db[o] += s[o - o0];
      }
    });
  }
}

}  // namespace strata::cpu
