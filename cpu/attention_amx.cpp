#include "cpu/attention_amx.h"

#include <cmath>

#include "cpu/attention_rows.h"
#include "cpu/convert.h"
#include "cpu/gemm_amx.h"
#include "cpu/simd.h"

namespace strata::cpu {

namespace {

// Query rows [r0, r1) attend to keys [0, r1): each product skips the blocks above the
// diagonal (as ops_attention.cpp's causal blocks).
constexpr int64_t kBlock = 64;
template <typename F>
void blocks(int64_t T, F&& f) {
  for (int64_t r0 = 0; r0 < T; r0 += kBlock) f(r0, std::min(T, r0 + kBlock));
}

// dst[r, 0:cols] = bf16(src[r, 0:cols]) for rows [r0, r1), both with row stride ld.
void round_rows(bf16* dst, const float* src, int64_t ld, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) convert_from_f32(dst + r * ld, DType::bf16, src + r * ld, size_t(cols));
}

// dst[c, r] = src[r, c]: rows × cols bf16 (row stride ld) into cols × rows.
void transpose_rows(bf16* dst, const bf16* src, int64_t ld, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
}

// dst rows (row stride ld) = src[c, r] transposed and rounded: src is cols × rows f32.
void scatter_transposed(bf16* dst, int64_t ld, const float* src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * ld + c] = from_f32<bf16>(src[c * rows + r]);
}

}  // namespace

bool attention_amx_fits(int64_t T, int64_t hd) { return T % 32 == 0 && hd % 32 == 0 && amx_ready(); }

// S [T,T] f32, P16 [T,T] bf16, k and v packed [T,hd] bf16 each, o [T,hd] f32.
size_t attention_amx_forward_floats(int64_t T, int64_t hd) { return size_t(T * T + T * T / 2 + 2 * T * hd); }

// P, dS [T,T] f32; a row-major and a packed bf16 [T,T]; k (twice) and v packed, qᵀ and dOᵀ
// [T,hd] bf16 each; dq, dkᵀ, dvᵀ [T,hd] f32.
size_t attention_amx_backward_floats(int64_t T, int64_t hd) { return size_t(3 * T * T + 5 * T * hd / 2 + 3 * T * hd); }

void attention_amx_forward_head(bf16* out, int64_t ldo, float* lse, const HeadView& x, int64_t T, int64_t hd,
                                const DropoutSpec& drop, int64_t b, int64_t h, int64_t NH, float* scratch) {
  float* S = scratch;
  bf16* P16 = reinterpret_cast<bf16*>(S + T * T);
  bf16* kp = P16 + T * T;
  bf16* vp = kp + T * hd;
  float* o = reinterpret_cast<float*>(vp + T * hd);
  const float scale = 1.0f / std::sqrt(float(hd));
  amx_pack_bt(kp, x.k, x.ld, T, hd);  // S = q·kᵀ
  amx_pack_b(vp, x.v, x.ld, T, hd);   // o = P·v
  blocks(T, [&](int64_t r0, int64_t r1) {
    amx_gemm(r1 - r0, r1, hd, scale, x.q + r0 * x.ld, x.ld, kp, hd, 0, S + r0 * T, T);
  });
  causal_softmax_rows(S, lse, T, drop, b, h, NH);
  blocks(T, [&](int64_t r0, int64_t r1) {
    round_rows(P16, S, T, r0, r1, r1);
    amx_gemm(r1 - r0, hd, r1, 1.0f, P16 + r0 * T, T, vp, T, 0, o + r0 * hd, hd);
  });
  for (int64_t t = 0; t < T; ++t) convert_from_f32(out + t * ldo, DType::bf16, o + t * hd, size_t(hd));
}

void attention_amx_backward_head(bf16* dq, bf16* dk, bf16* dv, int64_t lddx, const bf16* dout, const bf16* out,
                                 int64_t ldo, const float* lse, const HeadView& x, int64_t T, int64_t hd,
                                 const DropoutSpec& drop, int64_t b, int64_t h, int64_t NH, float* scratch) {
  float* P = scratch;
  float* dP = P + T * T;
  bf16* rows16 = reinterpret_cast<bf16*>(dP + T * T);   // P' then dS, row-major
  bf16* packed = rows16 + T * T;                        // P' then dS, as B
  bf16* kt = packed + T * T;                            // k packed as kᵀ (scores)
  bf16* vt = kt + T * hd;                               // v packed as vᵀ (dP')
  bf16* kb = vt + T * hd;                               // k packed as k (dq)
  bf16* qT = kb + T * hd;                               // qᵀ [hd, T]
  bf16* dOT = qT + T * hd;                              // dOᵀ [hd, T]
  float* dqf = reinterpret_cast<float*>(dOT + T * hd);  // [T, hd]
  float* dkT = dqf + T * hd;                            // [hd, T]
  float* dvT = dkT + T * hd;                            // [hd, T]
  const float scale = 1.0f / std::sqrt(float(hd));
  amx_pack_bt(kt, x.k, x.ld, T, hd);
  amx_pack_bt(vt, x.v, x.ld, T, hd);
  amx_pack_b(kb, x.k, x.ld, T, hd);
  blocks(T, [&](int64_t r0, int64_t r1) {  // P = exp(q·kᵀ·scale − lse), dP' = dO·vᵀ
    amx_gemm(r1 - r0, r1, hd, scale, x.q + r0 * x.ld, x.ld, kt, hd, 0, P + r0 * T, T);
    amx_gemm(r1 - r0, r1, hd, 1.0f, dout + r0 * ldo, ldo, vt, hd, 0, dP + r0 * T, T);
  });
  for (int64_t t = 0; t < T; ++t) {
    float* p = P + t * T;
    simd::exp_shift_sum(p, t + 1, lse[t]);
    for (int64_t j = t + 1; j < T; ++j) p[j] = 0;
    float D = 0;  // Σ_i dO·O = Σ_j P'·dP' for row t
    for (int64_t i = 0; i < hd; ++i) D += to_f32(dout[t * ldo + i]) * to_f32(out[t * ldo + i]);
    softmax_backward_row(dP + t * T, p, D, t, T, drop, b, h, NH);  // dP becomes dS, P becomes P'
  }
  transpose_rows(dOT, dout, ldo, T, hd);
  transpose_rows(qT, x.q, x.ld, T, hd);
  // dvᵀ = dOᵀ·P' (key columns gather from every query row; P' is zero above the diagonal)
  round_rows(rows16, P, T, 0, T, T);
  amx_pack_b(packed, rows16, T, T, T);
  amx_gemm(hd, T, T, 1.0f, dOT, T, packed, T, 0, dvT, T);
  // dq = dS·k·scale (query rows [r0, r1) need keys [0, r1)); dkᵀ = qᵀ·dS·scale
  round_rows(rows16, dP, T, 0, T, T);
  blocks(T, [&](int64_t r0, int64_t r1) {
    amx_gemm(r1 - r0, hd, r1, scale, rows16 + r0 * T, T, kb, T, 0, dqf + r0 * hd, hd);
  });
  amx_pack_b(packed, rows16, T, T, T);
  amx_gemm(hd, T, T, scale, qT, T, packed, T, 0, dkT, T);
  for (int64_t t = 0; t < T; ++t) convert_from_f32(dq + t * lddx, DType::bf16, dqf + t * hd, size_t(hd));
  scatter_transposed(dk, lddx, dkT, T, hd);
  scatter_transposed(dv, lddx, dvT, T, hd);
}

}  // namespace strata::cpu
