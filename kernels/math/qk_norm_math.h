// Where the q/k RMSNorm (Backend::qk_rmsnorm_*) normalises, shared by the CPU op and the CUDA
// kernels. Rows are fused q|k|v [(NH + 2·NKV)·d]; a group is one run of columns normalised by
// its own RMS:
//   per head (Qwen3, Gemma-3): NH + NKV groups of d, every q head scaled by weight[0, d), every
//     k head by weight[d, 2d);
//   whole (OLMo-2): two groups, all q heads [NH·d] scaled by weight[0, NH·d) and all k heads
//     [NKV·d] by weight[NH·d, (NH + NKV)·d).
// The v heads are copied. rstd holds one f32 per (row, group).
#pragma once
#include <cstdint>

#include "backend/op_specs.h"
#include "core/hd.h"

namespace strata::kernel_math {

struct QkNormGroups {
  int NH, NKV, d;
  bool whole;
  STRATA_HD int count() const { return whole ? 2 : NH + NKV; }
  STRATA_HD int width(int g) const { return whole ? (g == 0 ? NH : NKV) * d : d; }
  STRATA_HD int64_t column(int g) const { return whole ? (g == 0 ? 0 : int64_t(NH) * d) : int64_t(g) * d; }
  STRATA_HD int64_t weight_at(int g) const { return whole ? column(g) : (g < NH ? 0 : d); }
  STRATA_HD int64_t weights() const { return whole ? int64_t(NH + NKV) * d : 2 * int64_t(d); }
  STRATA_HD int64_t row_width() const { return int64_t(NH + 2 * NKV) * d; }
  // The weight gradient: weight column c scales `users(c)` groups of every row; user u is
  // group user_group(c, u), at row column user_column(c, u).
  STRATA_HD int users(int64_t c) const { return whole ? 1 : (c < d ? NH : NKV); }
  STRATA_HD int user_group(int64_t c, int u) const {
    return whole ? (c < int64_t(NH) * d ? 0 : 1) : (c < d ? u : NH + u);
  }
  STRATA_HD int64_t user_column(int64_t c, int u) const { return whole ? c : column(user_group(c, u)) + c % d; }
};

inline QkNormGroups qk_norm_groups(int n_head, int n_kv_head, int head_dim, const QkNormSpec& spec) {
  return {n_head, n_kv_head, head_dim, spec.whole};
}

}  // namespace strata::kernel_math
