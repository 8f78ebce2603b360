// The row kernels of the norms, the loss and the activations: LayerNorm and RMSNorm
// forward and backward rows in f32, bf16 or f16, the softmax cross-entropy row, and the GELU
// and SwiGLU, each written once over a vector type (row_kernels_impl.h, act_kernels_impl.h)
// and built twice — AVX2 (8 lanes, every CPU Strata runs on) and AVX-512 (16 lanes) — with
// the set chosen at run time, as the Adam kernels are.
// Statistics are f32 (the loss's sum and log in double, as before); tails past the last
// full vector take the same formula in scalar code.
#pragma once
#include <cstdint>
#include <string_view>

#include "core/dtype.h"

namespace strata::cpu {

enum class OpsIsa { avx2, avx512 };
std::string_view ops_isa_name(OpsIsa isa);
bool ops_isa_supported(OpsIsa isa);
// STRATA_OPS_ISA=avx2|avx512 (read once; an ISA this CPU lacks is an error), else the widest
// the CPU has (AVX-512 needs F and BW).
OpsIsa ops_isa();

template <typename T>
struct NormRows {
  // y = (x − mean)·rstd·w + b over C; writes the row's mean and rstd (eps 1e-5).
  void (*layernorm_forward)(T* y, const T* x, const T* w, const T* b, int64_t C, float* mean, float* rstd);
  // dx += the LayerNorm input gradient; pdw += x̂·dy, pdb += dy (f32 partial rows).
  void (*layernorm_backward)(T* dx, float* pdw, float* pdb, const T* dy, const T* x, const T* w, float mean, float rstd,
                             int64_t C);
  // y = x·r·(w + wofs), r = (mean x² + eps)^-1/2; writes r.
  void (*rmsnorm_forward)(T* y, const T* x, const T* w, float wofs, int64_t C, float eps, float* rstd);
  // dx (= or += with accumulate) r·(s·dy − x̂·mean(s·dy·x̂)), s = w + wofs, x̂ = x·r; pdw += x̂·dy.
  // dx may be dy: each element is read before it is written.
  void (*rmsnorm_backward)(T* dx, const T* dy, const T* x, const T* w, float wofs, float r, int64_t C, float* pdw,
                           bool accumulate);
};

template <typename T>
const NormRows<T>& norm_rows(OpsIsa isa);
template <typename T>
const NormRows<T>& norm_rows() {
  return norm_rows<T>(ops_isa());
}

// The activations over n elements (any n; the last partial vector through padded copies), the
// same bits on every ISA. dx may be dy, and dg/du may be dy: each vector is read before it is
// written.
template <typename T>
struct ActRows {
  void (*gelu_forward)(T* y, const T* x, int64_t n);                 // GPT-2's tanh GELU
  void (*gelu_backward)(T* dx, const T* x, const T* dy, int64_t n);  // dx = gelu'(x)·dy
  void (*swiglu_forward)(T* y, const T* g, const T* u, int64_t n);   // y = silu(g)·u
  void (*swiglu_backward)(T* dg, T* du, const T* g, const T* u, const T* dy, int64_t n);
  void (*geglu_forward)(T* y, const T* g, const T* u, int64_t n);  // y = gelu(g)·u (tanh GELU)
  void (*geglu_backward)(T* dg, T* du, const T* g, const T* u, const T* dy, int64_t n);
};

template <typename T>
const ActRows<T>& act_rows(OpsIsa isa);
template <typename T>
const ActRows<T>& act_rows() {
  return act_rows<T>(ops_isa());
}

// One row of logits [0, vocab) (f32, in place) → its gradient dloss·(softmax − onehot(target));
// returns the row's loss, lse − logit[target].
using SoftmaxCeRow = double (*)(float* row, int64_t vocab, int32_t target, float dloss);
SoftmaxCeRow softmax_ce_row(OpsIsa isa);

// Per-ISA sets (row_kernels_avx2.cpp, row_kernels_avx512.cpp).
template <typename T>
NormRows<T> norm_rows_avx2();
template <typename T>
NormRows<T> norm_rows_avx512();
SoftmaxCeRow softmax_ce_row_avx2();
SoftmaxCeRow softmax_ce_row_avx512();
template <typename T>
ActRows<T> act_rows_avx2();
template <typename T>
ActRows<T> act_rows_avx512();

}  // namespace strata::cpu
