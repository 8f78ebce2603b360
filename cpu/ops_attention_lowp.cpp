// Attention in a 16-bit run on a CPU that computes in 16 bits (S14): the same algorithm as
// ops_attention.cpp — one (batch, head) block per thread, the probabilities recomputed in
// backward from the saved log-sum-exp — with its five GEMMs on oneDNN's native kernels,
// reading q, k, v, dout straight from the activations and writing out and dqkv in place.
// The softmax and its gradient stay f32; the probabilities and dS are rounded to the
// 16-bit type as the GEMMs' inputs, as PyTorch's autocast does.
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "cpu/attention_lowp.h"
#include "cpu/attention_rows.h"
#include "cpu/convert.h"
#include "cpu/gemm_lowp.h"
#include "cpu/omp_threads.h"
#include "cpu/simd.h"

namespace strata::cpu {

namespace {

// One checked native GEMM: the caller chose this path because the shape has a native kernel.
void mm(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand a, GemmOperand b, void* c, DType c_t, int64_t ldc) {
  if (lowp_gemm(M, N, K, alpha, a, b, 0.0f, LowpOut{c, c_t, ldc})) return;
  std::string impl;  // only now: the step allocates nothing
  lowp_gemm(M, N, K, alpha, a, b, 0.0f, LowpOut{c, c_t, ldc}, &impl);
  throw_error("attention: no native 16-bit GEMM for " + std::to_string(M) + "x" + std::to_string(N) + "x" +
                  std::to_string(K) + " (lda " + std::to_string(a.ld) + (a.trans ? " transposed" : "") + ", ldb " +
                  std::to_string(b.ld) + (b.trans ? " transposed" : "") + "): oneDNN offers " + impl,
              "this is a bug: attention_lowp_available said there is one");
}

}  // namespace

bool attention_lowp_available(DType t, int64_t T, int64_t hd, int64_t C) {
  if ((t != DType::bf16 && t != DType::f16) || hd > 512 || !lowp_gemm_enabled()) return false;
  // Probed once per shape, with every GEMM's own layout (as the head's slices of qkv, dout
  // and dqkv lie).
  static std::mutex mu;
  static std::map<std::tuple<int, int64_t, int64_t, int64_t>, bool> known;
  std::lock_guard lock(mu);
  const auto key = std::make_tuple(int(t), T, hd, C);
  if (auto it = known.find(key); it != known.end()) return it->second;
  std::vector<uint16_t> x(size_t(T * 3 * C)), s(size_t(T * T)), y(size_t(T * 3 * C));
  std::vector<float> f(size_t(T * T));
  const float scale = 1.0f / std::sqrt(float(hd));
  auto lp = [&](int64_t M, int64_t N, int64_t K, float alpha, GemmOperand a, GemmOperand b, void* c, DType ct,
                int64_t ldc) {
    return lowp_gemm(M, N, K, alpha, a, b, 0.0f, LowpOut{c, ct, ldc});
  };
  const GemmOperand qkv_n{x.data(), t, 3 * C, false}, qkv_t{x.data(), t, 3 * C, true};
  const bool ok = lp(T, T, hd, scale, qkv_n, qkv_t, f.data(), DType::f32, T) &&                   // S
                  lp(T, hd, T, 1.0f, {s.data(), t, T, false}, qkv_n, y.data(), t, C) &&           // P·v
                  lp(T, T, hd, 1.0f, {y.data(), t, C, false}, qkv_t, f.data(), DType::f32, T) &&  // dO·vᵀ
                  lp(T, hd, T, 1.0f, {s.data(), t, T, true}, {y.data(), t, C, false}, x.data(), t, 3 * C) &&  // dv
                  lp(T, hd, T, scale, {s.data(), t, T, false}, qkv_n, y.data(), t, 3 * C) &&                  // dq
                  lp(T, hd, T, scale, {s.data(), t, T, true}, qkv_n, y.data(), t, 3 * C);                     // dk
  return known[key] = ok;
}

void attention_forward_lowp(TensorView out, TensorView lse, TensorView qkv, int64_t B, int64_t NH, Workspace& ws,
                            const DropoutSpec& drop) {
  const int64_t T = qkv.shape[1], C = qkv.shape[2] / 3, hd = C / NH;
  const DType t = qkv.dtype;
  // Per thread: S/P [T,T] in f32 and P in the 16-bit type.
  const size_t per_thread = size_t(T * T + (T * T + 1) / 2);
  float* scratch = ws.get<float>(Scratch::attention, per_thread * size_t(thread_count()));
  float* L = lse.as<float>();
  const float scale = 1.0f / std::sqrt(float(hd));
  const char* x = static_cast<const char*>(qkv.data);
  char* y = static_cast<char*>(out.data);
  const size_t esz = dtype_size(t);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* S = scratch + per_thread * size_t(thread_id());
    void* P16 = S + T * T;
    const char* q = x + size_t(b * T * 3 * C + h * hd) * esz;
    mm(T, T, hd, scale, {q, t, 3 * C, false}, {q + size_t(C) * esz, t, 3 * C, true}, S, DType::f32, T);
    causal_softmax_rows(S, L + bh * T, T, drop, b, h, NH);
    convert_from_f32(P16, t, S, size_t(T * T));
    mm(T, hd, T, 1.0f, {P16, t, T, false}, {q + size_t(2 * C) * esz, t, 3 * C, false},
       y + size_t(b * T * C + h * hd) * esz, t, C);
  }
}

void attention_backward_lowp(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                             int64_t B, int64_t NH, Workspace& ws, const DropoutSpec& drop) {
  const int64_t T = qkv.shape[1], C = qkv.shape[2] / 3, hd = C / NH;
  const DType t = qkv.dtype;
  // Per thread: P and dP [T,T] in f32, and both in the 16-bit type.
  const size_t per_thread = size_t(2 * T * T + 2 * ((T * T + 1) / 2));
  float* scratch = ws.get<float>(Scratch::attention, per_thread * size_t(thread_count()));
  const float* L = lse.as<float>();
  const float scale = 1.0f / std::sqrt(float(hd));
  const size_t esz = dtype_size(t);
  const char* x = static_cast<const char*>(qkv.data);
  char* dx = static_cast<char*>(dqkv.data);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t bh = 0; bh < B * NH; ++bh) {
    const int64_t b = bh / NH, h = bh % NH;
    float* P = scratch + per_thread * size_t(thread_id());
    float* dP = P + T * T;
    void* P16 = dP + T * T;
    void* dS16 = static_cast<char*>(P16) + size_t(T * T) * esz;
    const char* q = x + size_t(b * T * 3 * C + h * hd) * esz;
    const char* k = q + size_t(C) * esz;
    const char* v = q + size_t(2 * C) * esz;
    const char* dO = static_cast<const char*>(dout.data) + size_t(b * T * C + h * hd) * esz;
    const char* O = static_cast<const char*>(out.data) + size_t(b * T * C + h * hd) * esz;
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
    convert_from_f32(P16, t, P, size_t(T * T));
    convert_from_f32(dS16, t, dP, size_t(T * T));
    char* dq = dx + size_t(b * T * 3 * C + h * hd) * esz;
    mm(T, hd, T, 1.0f, {P16, t, T, true}, {dO, t, C, false}, dq + size_t(2 * C) * esz, t, 3 * C);  // dv = P'ᵀ·dO
    mm(T, hd, T, scale, {dS16, t, T, false}, {k, t, 3 * C, false}, dq, t, 3 * C);                  // dq = dS·k·scale
    mm(T, hd, T, scale, {dS16, t, T, true}, {q, t, 3 * C, false}, dq + size_t(C) * esz, t, 3 * C);  // dk = dSᵀ·q·scale
  }
}

}  // namespace strata::cpu
