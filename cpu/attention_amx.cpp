#include "cpu/attention_amx.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "cpu/attention_amx_rows.h"
#include "cpu/attention_rows.h"
#include "cpu/gemm_amx.h"
#include "host/convert.h"
#include "host/simd.h"

namespace strata::cpu {

namespace {

// Query rows [r0, r1) attend to keys [0, r1): each product skips the blocks above the
// diagonal (as ops_attention.cpp's causal blocks). Row blocks start at multiples of 64 and
// end at one or at T, so every block is a multiple of 32 (T is) as the tile kernel needs.
constexpr int64_t kBlock = 64;
template <typename F>
void blocks(int64_t T, F&& f) {
  for (int64_t r0 = 0; r0 < T; r0 += kBlock) f(r0, std::min(T, r0 + kBlock));
}

// dst[r, 0:cols] = bf16(src[r, 0:cols]) for rows [r0, r1), both with row stride ld.
void round_rows(bf16* dst, const float* src, int64_t ld, int64_t r0, int64_t r1, int64_t cols) {
  for (int64_t r = r0; r < r1; ++r) host::convert_from_f32(dst + r * ld, DType::bf16, src + r * ld, size_t(cols));
}

// C[hd, T] = a[hd, T] · B[T, T] where B (row-major bf16, row stride T) is zero above the
// diagonal (B[t, c] = 0 for c > t, as P' and dS are): key column block [c0, c1) sums over
// rows [c0, T) only. Each block's B is packed into packed + c0·T (its (T − c0) × 64 fit).
void causal_key_product(float* c, const bf16* a, const bf16* b, bf16* packed, int64_t hd, int64_t T, float alpha) {
  blocks(T, [&](int64_t c0, int64_t c1) {
    amx_pack_b(packed + c0 * T, b + c0 * T + c0, T, T - c0, c1 - c0);
    amx_gemm(hd, c1 - c0, T - c0, alpha, a + c0, T, packed + c0 * T, T - c0, 0, c + c0, T);
  });
}

}  // namespace

bool attention_amx_fits(int64_t T, int64_t hd) { return T % 32 == 0 && hd % 32 == 0 && amx_ready(); }

// S [T,T] f32, P16 [T,T] bf16, k and v packed [T,hd] bf16 each, o [T,hd] f32.
size_t attention_amx_forward_floats(int64_t T, int64_t hd) { return size_t(T * T + T * T / 2 + 2 * T * hd); }

// P, dP [T,T] f32; P', dS and a packed operand [T,T] bf16; k (twice) and v packed, qᵀ and dOᵀ
// [T,hd] bf16 each; dq, dkᵀ, dvᵀ [T,hd] f32.
size_t attention_amx_backward_floats(int64_t T, int64_t hd) {
  return size_t(2 * T * T + 3 * T * T / 2 + 5 * T * hd / 2 + 3 * T * hd);
}

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
  const auto scores = [&](int64_t r0, int64_t r1, float alpha) {
    amx_gemm(r1 - r0, r1, hd, alpha, x.q + r0 * x.ld, x.ld, kp, hd, 0, S + r0 * T, T);
  };
  const auto values = [&](int64_t r0, int64_t r1) {
    amx_gemm(r1 - r0, hd, r1, 1.0f, P16 + r0 * T, T, vp, T, 0, o + r0 * hd, hd);
  };
  if (drop.active()) {  // the mask's f32 rows, then rounded
    blocks(T, [&](int64_t r0, int64_t r1) { scores(r0, r1, scale); });
    causal_softmax_rows(S, T, lse, T, HeadDrop{drop, b, h, NH, T, 0});
    blocks(T, [&](int64_t r0, int64_t r1) {
      round_rows(P16, S, T, r0, r1, r1);
      values(r0, r1);
    });
  } else {
    blocks(T, [&](int64_t r0, int64_t r1) {
      scores(r0, r1, 1.0f);
      amx_softmax_rows(P16, S, lse, T, r0, r1, scale);
      values(r0, r1);
    });
  }
  for (int64_t t = 0; t < T; ++t) host::convert_from_f32(out + t * ldo, DType::bf16, o + t * hd, size_t(hd));
}

void attention_amx_backward_head(bf16* dq, bf16* dk, bf16* dv, int64_t lddx, const bf16* dout, const bf16* out,
                                 int64_t ldo, const float* lse, const HeadView& x, int64_t T, int64_t hd,
                                 const DropoutSpec& drop, int64_t b, int64_t h, int64_t NH, float* scratch) {
  float* P = scratch;
  float* dP = P + T * T;
  bf16* P16 = reinterpret_cast<bf16*>(dP + T * T);      // P', row-major
  bf16* dS16 = P16 + T * T;                             // dS, row-major
  bf16* packed = dS16 + T * T;                          // P' then dS, as B
  bf16* kt = packed + T * T;                            // k packed as kᵀ (scores)
  bf16* vt = kt + T * hd;                               // v packed as vᵀ (dP')
  bf16* kb = vt + T * hd;                               // k packed as k (dq)
  bf16* qT = kb + T * hd;                               // qᵀ [hd, T]
  bf16* dOT = qT + T * hd;                              // dOᵀ [hd, T]
  float* dqf = reinterpret_cast<float*>(dOT + T * hd);  // [T, hd]
  float* dkT = dqf + T * hd;                            // [hd, T]
  float* dvT = dkT + T * hd;                            // [hd, T]
  STRATA_CHECK(ldo % 2 == 0 && x.ld % 2 == 0 && T % 32 == 0 && hd % 32 == 0,
               "attention_amx_backward_head: T " + std::to_string(T) + ", head size " + std::to_string(hd) +
                   ", row strides " + std::to_string(ldo) + " and " + std::to_string(x.ld),
               "this is a bug in the caller (attention_amx_fits)");
  const float scale = 1.0f / std::sqrt(float(hd));
  amx_pack_bt(kt, x.k, x.ld, T, hd);
  amx_pack_bt(vt, x.v, x.ld, T, hd);
  amx_pack_b(kb, x.k, x.ld, T, hd);
  blocks(T, [&](int64_t r0, int64_t r1) {  // P = exp(q·kᵀ·scale − lse), dP' = dO·vᵀ, then P' and dS
    amx_gemm(r1 - r0, r1, hd, drop.active() ? scale : 1.0f, x.q + r0 * x.ld, x.ld, kt, hd, 0, P + r0 * T, T);
    amx_gemm(r1 - r0, r1, hd, 1.0f, dout + r0 * ldo, ldo, vt, hd, 0, dP + r0 * T, T);
    if (!drop.active()) amx_softmax_backward_rows(P16, dS16, P, dP, lse, dout, out, ldo, T, hd, r0, r1, scale);
  });
  if (drop.active()) {  // the mask's f32 rows, then rounded
    for (int64_t t = 0; t < T; ++t) {
      float* p = P + t * T;
      simd::exp_shift_sum(p, t + 1, lse[t]);
      for (int64_t j = t + 1; j < T; ++j) p[j] = 0;
      float D = 0;  // Σ_i dO·O = Σ_j P'·dP' for row t
      for (int64_t i = 0; i < hd; ++i) D += to_f32(dout[t * ldo + i]) * to_f32(out[t * ldo + i]);
      softmax_backward_row(dP + t * T, p, D, t, T, HeadDrop{drop, b, h, NH, T, 0});  // dP becomes dS, P becomes P'
    }
    round_rows(P16, P, T, 0, T, T);
    round_rows(dS16, dP, T, 0, T, T);
  }
  amx_transpose_bf16(dOT, dout, ldo, T, hd);
  amx_transpose_bf16(qT, x.q, x.ld, T, hd);
  causal_key_product(dvT, dOT, P16, packed, hd, T, 1.0f);   // dvᵀ = dOᵀ·P'
  causal_key_product(dkT, qT, dS16, packed, hd, T, scale);  // dkᵀ = qᵀ·dS·scale
  blocks(T, [&](int64_t r0, int64_t r1) {                   // dq = dS·k·scale
    amx_gemm(r1 - r0, hd, r1, scale, dS16 + r0 * T, T, kb, T, 0, dqf + r0 * hd, hd);
  });
  for (int64_t t = 0; t < T; ++t) host::convert_from_f32(dq + t * lddx, DType::bf16, dqf + t * hd, size_t(hd));
  amx_store_transposed(dk, lddx, dkT, T, hd);
  amx_store_transposed(dv, lddx, dvT, T, hd);
}

}  // namespace strata::cpu
