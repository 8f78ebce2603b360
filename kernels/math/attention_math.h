// The element math of the causal attention kernels (kernels/attention.cu), compiled for
// the device there and for the host by the serial drivers in attention_host.h, which CI
// holds to the CPU backend's cpu::attention_forward / cpu::attention_backward.
//
// Conventions are the CPU reference's: q is scaled by 1/sqrt(hd) in f32 before the dot
// with k (so s = (q·scale)·k), lse holds m + log Σ exp(s - m) of those scaled scores, and
// the backward recomputes P = exp(s - lse) rather than storing any T×T matrix.
//
// The forward is an online softmax over key tiles of kAttnTile keys: each tile's scores
// are masked, their maximum raises the running max m (the earlier sum l and output
// accumulator are rescaled by exp(m_old - m_new)), and the tile's weights exp(s - m) are
// added to l and, times v, to the accumulator. Reductions over a tile (max, sum) and the
// dot products are each side's own (warp shuffles on the device, loops on the host).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/hd.h"
#include "kernels/math/dropout_math.h"
#include "kernels/math/element_math.h"

namespace strata::kernel_math {

// Keys (forward, dq) or queries (dk/dv) per tile: one per lane of a warp.
constexpr int kAttnTile = 32;
// Largest head dimension the kernels take (eight f32 accumulators per lane and row).
constexpr int kAttnMaxHeadDim = 256;

// 1/sqrt(hd) exactly as the CPU reference rounds it (IEEE sqrt and division on both sides),
// or the spec's own scale.
STRATA_HD float attn_scale(int hd, const AttentionSpec& a) {
  return a.scale > 0.0f ? a.scale : 1.0f / sqrtf(float(hd));
}
// Soft-capping (Gemma-2): a scaled score s becomes cap·tanh(s/cap) (element_math.h).
STRATA_HD float attn_capped_score(float s, float cap) { return softcapped(s, cap); }
STRATA_HD float attn_cap_grad(float capped, float cap) { return softcap_grad(capped, cap); }

// Causal mask: query i sees keys j ≤ i; with a sliding window of W > 0 keys only the last W
// of them, i - W < j ≤ i (transformers' sliding-window mask: Mistral, Gemma's local layers);
// in a packed row only those of its own record, first ≤ j (segment_math.h).
STRATA_HD bool attn_visible(int i, int j, int window, int first = 0) {
  return j <= i && j >= first && (window <= 0 || i - j < window);
}

// The records of packed rows on the device: each token's position and the last row of its
// record, [B,T] each (segment_math.h); null: one record per row.
struct AttnRecords {
  const int32_t* pos = nullptr;
  const int32_t* last = nullptr;
};
// The first row of query i's record in batch row b, and the last row of key j's.
STRATA_HD int attn_record_first(const AttnRecords& r, int b, int T, int i) {
  return r.pos ? i - r.pos[int64_t(b) * T + i] : 0;
}
STRATA_HD int attn_record_last(const AttnRecords& r, int b, int T, int j) {
  return r.last ? r.last[int64_t(b) * T + j] : T - 1;
}
// The first key tile a query row `first_row` (and every later row) may see.
STRATA_HD int attn_first_key_tile(int first_row, int window) {
  return window > 0 && first_row >= window ? (first_row - window + 1) / kAttnTile : 0;
}
// The last query tile that may see key `last_key` (or any earlier key), of T rows.
STRATA_HD int attn_last_query_tile(int last_key, int window, int T) {
  const int last = window > 0 && last_key < T - window ? last_key + window - 1 : T - 1;
  return last / kAttnTile;
}
// A masked score is -inf so that it neither raises the max nor adds weight.
STRATA_HD float attn_masked_score(float dot, bool visible) { return visible ? dot : -INFINITY; }

// ---- forward: online softmax of one query row ----
struct SoftmaxState {
  float m;  // running max of the scores seen so far (-inf before any)
  float l;  // Σ exp(s - m) over those scores
};
STRATA_HD SoftmaxState softmax_init() { return SoftmaxState{-INFINITY, 0.0f}; }
// Raises the running max to cover a tile whose largest masked score is tile_max, rescales
// l, and returns the factor the output accumulator must be multiplied by. The first
// visible score gives exp(-inf) = 0 (l and the accumulator are still 0). A fully masked
// tile (tile_max = -inf) leaves everything unchanged: the factor is exactly 1, and 1 also
// while nothing has been seen, where exp(-inf - -inf) would be NaN.
STRATA_HD float softmax_rescale(SoftmaxState& st, float tile_max) {
  const float m_new = fmaxf(st.m, tile_max);
  const float alpha = m_new == -INFINITY ? 1.0f : expf(st.m - m_new);
  st.m = m_new;
  st.l *= alpha;
  return alpha;
}
// Unnormalised weight of a score after softmax_rescale for its tile (0 for a masked one).
STRATA_HD float softmax_weight(float s, const SoftmaxState& st) { return s == -INFINITY ? 0.0f : expf(s - st.m); }
// Adds a tile's Σ softmax_weight to the running sum.
STRATA_HD void softmax_accumulate(SoftmaxState& st, float tile_sum) { st.l += tile_sum; }
// The saved statistic: log Σ_j exp(s_j) = m + log l.
STRATA_HD float softmax_lse(const SoftmaxState& st) { return st.m + logf(st.l); }
// out = accumulator · softmax_inv (the CPU reference also multiplies by 1/sum).
STRATA_HD float softmax_inv(const SoftmaxState& st) { return 1.0f / st.l; }

// ---- backward ----
// P_ij recomputed from the score and the row's saved lse.
STRATA_HD float attn_prob(float s, float lse) { return expf(s - lse); }
// dS_ij = P_ij·(dP_ij - D_i), dP_ij = dout_i·v_j, D_i = Σ_c dout_ic·out_ic (= Σ_j P_ij·dP_ij).
STRATA_HD float attn_dscore(float p, float dp, float D) { return p * (dp - D); }
// A masked pair contributes neither to dv (P = 0) nor to dq/dk (dS = 0). With dropout the
// forward used P'_ij = P_ij·m_ij (m the dropout factor, 1 without): *p is P' (for dv) and
// dS = P·(dP'·m - D), where dP' = dout_i·v_j and D = Σ_j P'·dP' = Σ_c dout·out still. `s` is
// the (capped) score; under a cap dS carries its derivative, to the scaled score q·k.
STRATA_HD void attn_grad_pair(float s, float dp, float lse, float D, bool visible, float mult, float cap, float* p,
                              float* ds) {
  const float prob = visible ? attn_prob(s, lse) : 0.0f;
  *ds = visible ? attn_dscore(prob, dp * mult, D) * attn_cap_grad(s, cap) : 0.0f;
  *p = prob * mult;
}

// ---- launch shapes (host arithmetic, shared by the launchers and the tests) ----
// f32 accumulators per lane for one row: hd split over the 32 lanes, rounded up to 1, 2,
// 4 or 8 so that few kernel variants cover every hd ≤ kAttnMaxHeadDim.
inline int attn_lane_chunks(int hd) {
  const int need = (hd + kAttnTile - 1) / kAttnTile;
  return need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : 8;
}
// Head rows are padded to a multiple of 4 floats in shared memory (float4 reads, zero pad).
STRATA_HD int attn_padded_hd(int hd) { return (hd + 3) & ~3; }
// Transposed tiles hold element (row r, dim d) at d·kAttnTileStride + r: the odd stride
// keeps both a lane-per-row and a lane-per-dim access free of bank conflicts.
constexpr int kAttnTileStride = kAttnTile + 1;
inline size_t attn_tile_floats(int hd) { return size_t(attn_padded_hd(hd)) * kAttnTileStride; }

}  // namespace strata::kernel_math
