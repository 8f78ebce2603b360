// Packed rows: several records in one row of T tokens, each with its own positions. A
// record's tokens carry positions 0, 1, 2, … from its first row, so position p of row t says
// the record began at row t - p. Attention keeps each query inside its record (keys from
// t - p to t), RoPE and learned position embeddings read p instead of t, and the loss mask
// is the data's. Positions are checked by check_positions (backend/op_checks.h).
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace strata::kernel_math {

// The last row of each row's record, for the kernels that walk from a key forward (the
// attention's dk/dv): last[b·T + t] over positions [B,T]. Host arithmetic.
inline void segment_last_rows(int32_t* last, const int32_t* positions, int64_t B, int64_t T) {
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* p = positions + b * T;
    int64_t end = T - 1;
    for (int64_t t = T - 1; t >= 0; --t) {
      last[b * T + t] = int32_t(end);
      if (p[t] == 0) end = t - 1;
    }
  }
}

}  // namespace strata::kernel_math
