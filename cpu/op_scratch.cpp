#include "cpu/op_scratch.h"

#include <algorithm>

#include "cpu/attention_amx.h"
#include "cpu/dout_split.h"

namespace strata::cpu {

// f32 GEMM panels (A: M × 256, B: 256 × 4096 at most), the f32 accumulator of a 16-bit
// matmul, the per-thread attention blocks, the norms' per-thread partial sums, and the LM
// head's f32 gradient split into two bf16 terms in blocks of 4096 columns with its sparse lo
// (cpu/ops_matmul.cpp, cpu/dout_split.h).
double op_scratch_bytes(const OpShapes& s) {
  const double BT = double(s.rows()), C = double(s.width), T = double(s.seq_len), hd = double(s.head_dim);
  const double widest = double(s.widest), vocab = double(s.padded_vocab), threads = s.threads;
  const double rows = std::max({BT, widest, vocab});
  const double gemm_a = rows * std::min(256.0, std::max(C, BT));
  const double gemm_b = 256.0 * std::min(4096.0, std::max(widest, vocab));
  const double gemm_c = BT * std::max({widest, double(s.qkv_width), 3 * C});
  // The f32 path's blocks (cpu/ops_attention.cpp) or the AMX path's, whichever is larger.
  const double attention =
      threads * std::max(2.0 * T * T + 8.0 * T * hd, double(attention_amx_backward_floats(s.seq_len, s.head_dim)));
  const double dout_split = BT * std::min(4096.0, vocab) +  // hi and lo, 2 B each
                            double(sparse_lo_bytes(s.rows())) / 4;
  return 4 * (gemm_a + gemm_b + gemm_c + attention + threads * 2 * C + dout_split);
}

}  // namespace strata::cpu
