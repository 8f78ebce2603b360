// Attention in a bf16 run on a CPU with AVX512-BF16 (S14): the same algorithm as
// ops_attention.cpp — one (batch, head) block per thread, the probabilities recomputed in
// backward from the saved log-sum-exp — with its six GEMMs on Strata's bf16 kernel
// (cpu/gemm_bf16.h), reading q, k, v and dout in place and writing out and dqkv in place.
// The scores, softmax and its gradient stay f32, and so do the probabilities and dS as GEMM
// operands: the kernel pairs their bf16 halves (hi + lo) with v, dO, k and q, so nothing is
// rounded to bf16 but the outputs, and the results match the f32 op within its own rounding.
#include <algorithm>
#include <cmath>

#include "cpu/attention_lowp.h"
#include "cpu/attention_rows.h"
#include "cpu/convert.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_lowp.h"
#include "cpu/omp_threads.h"
#include "cpu/simd.h"

namespace strata::cpu {

namespace {

// Per thread: the pack scratch of the largest of the six GEMMs (run on one thread each).
size_t gemm_scratch(int64_t T, int64_t hd) {
  const size_t s = gemm_bf16_scratch_bytes(T, T, hd, DType::bf16, DType::f32, 1),  // scores, dP
      p = gemm_bf16_scratch_bytes(T, hd, T, DType::f32, DType::bf16, 1);           // P·v, dv, dq, dk
  return (std::max(s, p) + 63) / 64 * 64;
}

}  // namespace

bool attention_lowp_available(DType t, int64_t hd) {
  const LowpGemm mode = lowp_gemm_mode();
  return t == DType::bf16 && hd <= 512 && (mode == LowpGemm::strata || (mode == LowpGemm::onednn && gemm_bf16_pays()));
}

void attention_forward_lowp(TensorView out, TensorView lse, TensorView qkv, int64_t B, int64_t NH, Workspace& ws,
                            const DropoutSpec& drop) {
  const int64_t T = qkv.shape[1], C = qkv.shape[2] / 3, hd = C / NH;
  const DType t = qkv.dtype;
  // Per thread: S/P [T,T] in f32 and the GEMMs' pack scratch.
  const size_t g = gemm_scratch(T, hd), per_thread = size_t(T * T) * 4 + g;
  char* scratch = static_cast<char*>(ws.get(Scratch::attention, per_thread * size_t(thread_count())));
  float* L = lse.as<float>();
  const float scale = 1.0f / std::sqrt(float(hd));
  const char* x = static_cast<const char*>(qkv.data);
  char* y = static_cast<char*>(out.data);
  const size_t esz = dtype_size(t);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    char* mine = scratch + per_thread * size_t(thread_id());
    float* S = reinterpret_cast<float*>(mine);
    void* gs = mine + size_t(T * T) * 4;
    const char* q = x + size_t(b * T * 3 * C + h * hd) * esz;
    gemm_bf16(T, T, hd, scale, {q, t, 3 * C, false}, {q + size_t(C) * esz, t, 3 * C, true}, 0.0f,
              LowpOut{S, DType::f32, T}, gs, 1);
    causal_softmax_rows(S, L + bh * T, T, drop, b, h, NH);
    gemm_bf16(T, hd, T, 1.0f, {S, DType::f32, T, false}, {q + size_t(2 * C) * esz, t, 3 * C, false}, 0.0f,
              LowpOut{y + size_t(b * T * C + h * hd) * esz, t, C}, gs, 1);
  }
}

void attention_backward_lowp(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                             int64_t B, int64_t NH, Workspace& ws, const DropoutSpec& drop) {
  const int64_t T = qkv.shape[1], C = qkv.shape[2] / 3, hd = C / NH;
  const DType t = qkv.dtype;
  // Per thread: P and dP [T,T] in f32 and the GEMMs' pack scratch.
  const size_t g = gemm_scratch(T, hd), per_thread = size_t(2 * T * T) * 4 + g;
  char* scratch = static_cast<char*>(ws.get(Scratch::attention, per_thread * size_t(thread_count())));
  const float* L = lse.as<float>();
  const float scale = 1.0f / std::sqrt(float(hd));
  const size_t esz = dtype_size(t);
  const char* x = static_cast<const char*>(qkv.data);
  char* dx = static_cast<char*>(dqkv.data);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    char* mine = scratch + per_thread * size_t(thread_id());
    float* P = reinterpret_cast<float*>(mine);
    float* dP = P + T * T;
    void* gs = dP + T * T;
    const char* q = x + size_t(b * T * 3 * C + h * hd) * esz;
    const char* k = q + size_t(C) * esz;
    const char* v = q + size_t(2 * C) * esz;
    const char* dO = static_cast<const char*>(dout.data) + size_t(b * T * C + h * hd) * esz;
    const char* O = static_cast<const char*>(out.data) + size_t(b * T * C + h * hd) * esz;
    auto mm = [&](int64_t M, int64_t N, int64_t K, float alpha, GemmOperand a, GemmOperand bb, void* c, DType ct,
                  int64_t ldc) {
      gemm_bf16(M, N, K, alpha, a, bb, 0.0f, LowpOut{c, ct, ldc}, gs, 1);
    };
    mm(T, T, hd, scale, {q, t, 3 * C, false}, {k, t, 3 * C, true}, P, DType::f32, T);  // scores
    const float* lrow = L + bh * T;
    for (int64_t r = 0; r < T; ++r) {
      float* p = P + r * T;
      simd::exp_shift_sum(p, r + 1, lrow[r]);
      for (int64_t j = r + 1; j < T; ++j) p[j] = 0;
    }
    mm(T, T, hd, 1.0f, {dO, t, C, false}, {v, t, 3 * C, true}, dP, DType::f32, T);  // dP' = dO·vᵀ
    float o_row[512], do_row[512];  // hd ≤ 512 (checked by the caller)
    for (int64_t r = 0; r < T; ++r) {
      convert_to_f32(o_row, O + size_t(r * C) * esz, t, size_t(hd));
      convert_to_f32(do_row, dO + size_t(r * C) * esz, t, size_t(hd));
      float D = 0;  // Σ_i dO·O = Σ_j P'·dP' for row r
      for (int64_t i = 0; i < hd; ++i) D += do_row[i] * o_row[i];
      softmax_backward_row(dP + r * T, P + r * T, D, r, T, drop, b, h, NH);  // dv below takes P'
    }
    char* dq = dx + size_t(b * T * 3 * C + h * hd) * esz;
    const DType f = DType::f32;
    mm(T, hd, T, 1.0f, {P, f, T, true}, {dO, t, C, false}, dq + size_t(2 * C) * esz, t, 3 * C);   // dv = P'ᵀ·dO
    mm(T, hd, T, scale, {dP, f, T, false}, {k, t, 3 * C, false}, dq, t, 3 * C);                   // dq = dS·k·scale
    mm(T, hd, T, scale, {dP, f, T, true}, {q, t, 3 * C, false}, dq + size_t(C) * esz, t, 3 * C);  // dk = dSᵀ·q·scale
  }
}

}  // namespace strata::cpu
