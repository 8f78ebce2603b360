// The CUDA backend's op scratch sizes, in one place for the kernels' launchers
// (kernels/launch*.h) and for the plan (cuda_op_scratch_bytes), so what a step allocates and
// what `strata plan` charges cannot drift apart. Host code; built in every configuration.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/op_shapes.h"
#include "kernels/math/launch_shape.h"

namespace strata::kernel_math {

// cuBLASLt's workspace, as llm.c and PyTorch give it.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;
// Token ids reach the device through a ring of this many pinned slots.
constexpr int kTokenSlots = 4;

// The norms' backward: per column slice, partial dweight and dbias rows.
inline size_t norm_backward_scratch_bytes(int64_t N, int64_t C) { return size_t(column_slices(N)) * size_t(C) * 2 * 4; }
// A bias gradient's column sums: per column slice, one partial row.
inline size_t column_sum_scratch_bytes(int64_t N, int64_t C) { return size_t(column_slices(N)) * size_t(C) * 4; }
// q/k RMSNorm's backward: per column slice of N·heads rows, a partial row of the q and k
// weights (`weights` of them: 2·head_dim per head, (NH + NKV)·head_dim whole).
inline size_t qk_norm_scratch_bytes(int64_t N, int n_head, int64_t weights) {
  return size_t(column_slices(N * n_head)) * size_t(weights) * 4;
}
// Attention's backward: D = rowsum(dO ∘ O), one f32 per (batch, query, head).
inline size_t attention_backward_scratch_bytes(int B, int T, int NH) {
  return size_t(std::max(B, 0)) * size_t(std::max(T, 0)) * size_t(std::max(NH, 0)) * sizeof(float);
}
// The global-norm square sum: one f64 partial per chunk, per stream that runs it.
inline size_t square_sum_scratch_bytes() { return size_t(kMaxSquareChunks) * sizeof(double); }
// RoPE's cos/sin table for T positions.
inline size_t rope_table_bytes(int64_t T, int head_dim) { return size_t(T) * size_t(head_dim / 2) * 2 * 4; }

// Everything the CUDA backend allocates beside the engine's and the model's buffers for a
// step of these shapes: the GEMM workspace, the op scratch (grown by doubling, so at most
// twice the largest request), the square-sum partials of up to `streams` streams, one RoPE
// table, the token ring and the packed rows' positions and record ends.
// A run makes at most 6 streams: compute, the engine's communication stream and the tier
// manager's four (zero_engine.cpp, tier_manager.cpp); each that sums squares gets its own partials.
inline double cuda_op_scratch_bytes(const OpShapes& s, int streams = 6) {
  const int64_t N = s.rows();
  const int64_t columns = std::max({s.width, s.widest, s.qkv_width, 3 * s.width});
  const size_t largest =
      std::max({norm_backward_scratch_bytes(N, s.width), column_sum_scratch_bytes(N, columns),
                qk_norm_scratch_bytes(N, int(s.n_head), std::max<int64_t>(2 * s.head_dim, s.qkv_width)),
                attention_backward_scratch_bytes(int(s.batch), int(s.seq_len), int(s.n_head))});
  return double(kGemmWorkspaceBytes) + 2.0 * double(largest) + double(streams) * double(square_sum_scratch_bytes()) +
         double(s.rope_tables) * double(rope_table_bytes(s.seq_len, int(s.head_dim))) +
         double(kTokenSlots) * double(N) * 4 + 2.0 * double(N) * 4;
}

}  // namespace strata::kernel_math
