// Linear layers: out = inp · W^T + b (and fused with GPT-2's GELU) and the backward, on top
// of cpu::gemm.
#include <cstring>

#include "cpu/dout_split.h"
#include "cpu/gemm.h"
#include "cpu/gemm_path.h"
#include "cpu/ops.h"
#include "cpu/row_kernels.h"
#include "host/convert.h"
#include "host/simd.h"

namespace strata::cpu {

namespace {

// One row of a linear layer's output pass: y = acc + b (rounded to T), and with `gelu` also
// g = gelu(y) from the rounded y by gelu_forward's own row kernel, while the row is in cache.
template <typename T>
void bias_gelu_row(T* y, T* g, const float* acc, const T* b, int64_t n, void (*gelu)(T*, const T*, int64_t)) {
  auto chunk = [&](T* yd, const float* a, const T* bb) {
    simd::store8(yd, b ? _mm256_add_ps(simd::load8(a), simd::load8(bb)) : simd::load8(a));
  };
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) chunk(y + i, acc + i, b ? b + i : nullptr);
  if (i < n) {  // the tail through padded copies: the same arithmetic
    T yt[8], bt[8] = {};
    float at[8] = {};
    std::memcpy(at, acc + i, size_t(n - i) * sizeof(float));
    if (b) std::memcpy(bt, b + i, size_t(n - i) * sizeof(T));
    chunk(yt, at, b ? bt : nullptr);
    std::memcpy(y + i, yt, size_t(n - i) * sizeof(T));
  }
  if (g) gelu(g, y, n);
}

// out = inp · Wᵀ + b; with `gelu` given also gelu = GELU(out), in the output's own pass.
void linear_forward(TensorView out, TensorView gelu, TensorView inp, TensorView weight, TensorView bias,
                    Workspace& ws) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C, OC = weight.shape[0];
  expect_numel(weight, OC * C, "matmul_forward", "weight");
  expect_numel(out, N * OC, "matmul_forward", "out");
  const bool has_bias = !bias.empty(), has_gelu = !gelu.empty();
  if (has_gelu) {
    expect_numel(gelu, N * OC, "matmul_gelu_forward", "out");
    expect_dtype(gelu, out.dtype, "matmul_gelu_forward", "out");
  }
  // 16-bit operands on the native path: the product, the bias and the rounding in one pass,
  // straight into out (the GELU then in its own).
  if (inp.dtype != DType::f32 && (out.dtype == DType::f32 || out.dtype == inp.dtype) &&
      (!has_bias || bias.dtype == weight.dtype) &&
      gemm_native(N, OC, C, 1.0f, {inp.data, inp.dtype, C, false}, {weight.data, weight.dtype, C, true}, 0.0f,
                  LowpOut{out.data, out.dtype, OC, has_bias ? bias.data : nullptr, bias.dtype}, ws)) {
    if (has_gelu) gelu_forward(gelu, out);
    return;
  }
  // Accumulate in f32: directly into out when it is f32, else into scratch; then one pass
  // adds the bias, rounds, and applies the GELU.
  float* acc = out.dtype == DType::f32 ? out.as<float>() : ws.get<float>(Scratch::gemm_c, size_t(N * OC));
  gemm(N, OC, C, 1.0f, {inp.data, inp.dtype, C, false}, {weight.data, weight.dtype, C, true}, 0.0f, acc, OC, ws);
  if (out.dtype == DType::f32 && !has_bias && !has_gelu) return;
  dispatch_act(out.dtype, [&]<typename T>(T) {
    // An f32 output takes a bias of the weight's type: widened to f32 here (OC floats).
    STRATA_CHECK(!has_bias || bias.dtype == out.dtype || out.dtype == DType::f32,
                 "matmul_forward: bias dtype " + std::string(dtype_name(bias.dtype)) + " with output dtype " +
                     std::string(dtype_name(out.dtype)),
                 "the bias must be the weight's dtype");
    const T* b = nullptr;
    if (has_bias && bias.dtype == out.dtype) {
      b = bias.as<T>();
    } else if (has_bias) {  // f32 output, 16-bit bias: widened once (then T is float)
      float* bw = ws.get<float>(Scratch::layernorm, size_t(OC));
      host::convert_to_f32(bw, bias.data, bias.dtype, size_t(OC));
      b = reinterpret_cast<const T*>(bw);
    }
    T* y = out.as<T>();
    T* g = has_gelu ? gelu.as<T>() : nullptr;
    const auto gelu_row = act_rows<T>().gelu_forward;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
      bias_gelu_row<T>(y + n * OC, g ? g + n * OC : nullptr, acc + n * OC, b, OC, gelu_row);
  });
}

// Columns of an f32 dout split into bf16 at a time (the planner's op-scratch bound,
// src/train/planner.cpp, counts two BT × this many bf16 blocks and the sparse lo).
constexpr int64_t kDoutColumns = 4096;

// The backward of a layer whose operands are bf16 but whose output gradient is f32 (the LM
// head: the logits and their gradient stay f32 for the cross-entropy), on the native path:
// the f32 panels would widen the vocabulary-sized weight and run both products at the f32
// rate.
// - dout goes in as hi = bf16(dout) and lo = dout − hi (cpu/dout_split.h), 16 or more of its
//   24 significant bits, and both products take both terms. Rounding dout to bf16 alone (as
//   PyTorch's autocast does) breaks the bf16 tolerance against PyTorch's float64 reference
//   where sums over rows cancel; dW on hi alone breaks stage 3's f32-level agreement across
//   rank counts (Offload.ParametersOnTheHost).
// - lo goes in sparse where the gradient has a cross-entropy's shape (a few large elements
//   per row: dinp adds their rows of W, dW their rows of the input), else as a second bf16
//   GEMM per product; the sparse form saves that GEMM's FLOPs. Each dropped lo is under 2^-18
//   of its row's largest element (dout_split.h).
// - A block of columns at a time, so each block feeds dinp and its own rows of dW while it is
//   still in cache.
// False, with dW untouched, where no native path takes these operands: the caller's f32
// panels then compute both products.
bool backward_split_dout(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                         Workspace& ws) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C, OC = weight.shape[0];
  if (dout.dtype != DType::f32 || weight.dtype != DType::bf16 || inp.dtype != DType::bf16 ||
      lowp_gemm_mode() == LowpGemm::off)
    return false;
  const int64_t cols = std::min(OC, kDoutColumns);
  char* scratch = ws.get<char>(Scratch::dout16, size_t(2 * N * cols) * sizeof(bf16) + sparse_lo_bytes(N));
  bf16* hi = reinterpret_cast<bf16*>(scratch);
  bf16* lo = hi + N * cols;
  SparseLo sparse = sparse_lo_in(lo + N * cols, N);
  float* acc =
      dinp.empty() || dinp.dtype == DType::f32 ? dinp.as<float>() : ws.get<float>(Scratch::gemm_c, size_t(N * C));
  const float* g = dout.as<float>();
  const bf16* w = weight.as<bf16>();
  const bf16* x = inp.as<bf16>();
  float* dw = dweight.as<float>();
  sparse_lo_thresholds(sparse, g, OC, N, OC);
  for (int64_t v0 = 0; v0 < OC; v0 += cols) {
    const int64_t vc = std::min(cols, OC - v0);
    // hi [vc, N] and lo's large elements per row; lo [vc, N] dense only where they do not fit
    const bool sparse_lo = split_bf16_transposed(hi, nullptr, &sparse, g + v0, OC, N, vc);
    if (!sparse_lo) split_bf16_transposed(hi, lo, nullptr, g + v0, OC, N, vc);
    const GemmOperand wv{w + v0 * C, DType::bf16, C, false}, xo{x, DType::bf16, C, false};
    const bool first = v0 == 0;
    // dinp[N,C] (+)= dout[:, v0:v0+vc] · W[v0:v0+vc, :], hi then lo
    const bool did_dinp = !acc || (gemm_native(N, C, vc, 1.0f, {hi, DType::bf16, N, true}, wv, first ? 0.0f : 1.0f,
                                               LowpOut{acc, DType::f32, C}, ws) &&
                                   (sparse_lo || gemm_native(N, C, vc, 1.0f, {lo, DType::bf16, N, true}, wv, 1.0f,
                                                             LowpOut{acc, DType::f32, C}, ws)));
    // dW[v0:v0+vc, :] += dout[:, v0:v0+vc]ᵀ · inp, hi then lo
    const bool did_dw = did_dinp && gemm_native(vc, C, N, 1.0f, {hi, DType::bf16, N, false}, xo, 1.0f,
                                                LowpOut{dw + v0 * C, DType::f32, C}, ws);
    if (!did_dw) {  // oneDNN declined a shape (not seen): the panels can take over only before dW was touched
      STRATA_CHECK(first, "matmul_backward: the native bf16 path took a block of dout and not the next",
                   "set STRATA_LOWP_GEMM=off, and report this");
      return false;
    }
    if (sparse_lo) {
      if (acc) add_sparse_lo(acc, sparse, w + v0 * C, N, C);
      add_sparse_lo_dw(dw + v0 * C, sparse, x, N, C, vc);
    } else {
      STRATA_CHECK(
          gemm_native(vc, C, N, 1.0f, {lo, DType::bf16, N, false}, xo, 1.0f, LowpOut{dw + v0 * C, DType::f32, C}, ws),
          "matmul_backward: the native bf16 path took dout's hi term and not its lo (the same shape)",
          "set STRATA_LOWP_GEMM=off, and report this");
    }
  }
  if (acc && acc != dinp.data) host::convert_parallel(dinp.data, dinp.dtype, acc, DType::f32, size_t(N * C));
  return true;
}

}  // namespace

void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias, Workspace& ws) {
  linear_forward(out, {}, inp, weight, bias, ws);
}

void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight, TensorView bias,
                         Workspace& ws) {
  linear_forward(pre, out, inp, weight, bias, ws);
}

void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                     TensorView weight, Workspace& ws) {
  const int64_t C = inp.shape[inp.shape.rank - 1], N = inp.numel() / C, OC = weight.shape[0];
  expect_numel(dout, N * OC, "matmul_backward", "dout");
  const bool frozen = dweight.empty();  // a weight that is not trained: dinp alone
  if (!frozen) {
    expect_numel(dweight, OC * C, "matmul_backward", "dweight");
    expect_dtype(dweight, DType::f32, "matmul_backward", "dweight");
  }
  if (!dinp.empty()) expect_numel(dinp, N * C, "matmul_backward", "dinp");
  if (frozen || !backward_split_dout(dinp, dweight, dout, inp, weight, ws)) {
    // dinp[N,C] = dout[N,OC] · W[OC,C]
    if (!dinp.empty()) {
      // 16-bit: straight into dinp, rounded once (as below, without the f32 pass).
      const bool direct =
          dinp.dtype == dout.dtype && dout.dtype != DType::f32 &&
          gemm_native(N, C, OC, 1.0f, {dout.data, dout.dtype, OC, false}, {weight.data, weight.dtype, C, false}, 0.0f,
                      LowpOut{dinp.data, dinp.dtype, C}, ws);
      if (!direct) {
        float* acc = dinp.dtype == DType::f32 ? dinp.as<float>() : ws.get<float>(Scratch::gemm_c, size_t(N * C));
        gemm(N, C, OC, 1.0f, {dout.data, dout.dtype, OC, false}, {weight.data, weight.dtype, C, false}, 0.0f, acc, C,
             ws);
        if (dinp.dtype != DType::f32) host::convert_parallel(dinp.data, dinp.dtype, acc, DType::f32, size_t(N * C));
      }
    }
    // dW[OC,C] += dout^T[OC,N] · inp[N,C]
    if (!frozen)
      gemm(OC, C, N, 1.0f, {dout.data, dout.dtype, OC, true}, {inp.data, inp.dtype, C, false}, 1.0f,
           dweight.as<float>(), C, ws);
  }
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
