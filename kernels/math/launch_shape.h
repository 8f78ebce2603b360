// Launch shapes and work splits of the CUDA kernels: plain host arithmetic, unit-tested in
// CI (tests/test_kernel_math.cpp) so a wrong grid never waits for a GPU to be found out.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/hd.h"

namespace strata::kernel_math {

constexpr int kThreads = 256;            // threads per block of the elementwise and row kernels
constexpr int kWarp = 32;                // lanes per warp
constexpr int64_t kMaxGrid = 65535 * 8;  // grid-stride loops cover the rest

// Blocks for a grid-stride loop over n elements (≥ 1 so a launch is always valid).
inline int grid_for(int64_t n, int threads = kThreads) {
  return int(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxGrid));
}

// Row kernels: one warp per row, kThreads/kWarp rows per block.
constexpr int kRowsPerBlock = kThreads / kWarp;
inline int grid_for_rows(int64_t rows) { return int(std::max<int64_t>(1, (rows + kRowsPerBlock - 1) / kRowsPerBlock)); }

// The square sum's split: fixed chunks, as the host engine ops' (src/host/engine_ops.cpp), so the
// order of the f64 partial sums depends on n alone. One block per chunk, then one block
// adds the partials in chunk order.
constexpr int64_t kMaxSquareChunks = 1024;
inline int64_t square_chunk(int64_t n) {
  return std::max<int64_t>(4096, (n + kMaxSquareChunks - 1) / kMaxSquareChunks / 8 * 8 + 8);
}
inline int64_t square_chunks(int64_t n) { return n <= 0 ? 0 : (n + square_chunk(n) - 1) / square_chunk(n); }

// Column sums over many rows (dbias, the norms' dweight): the rows are cut into at most
// kColumnSlices slices, each block sums its slice of rows for a strip of columns into a
// partial row, and a second pass adds the partials in slice order (deterministic, no atomics).
constexpr int kColumnSlices = 64;
inline int column_slices(int64_t rows) { return int(std::clamp<int64_t>(rows / 32, 1, kColumnSlices)); }
STRATA_HD int64_t slice_begin(int64_t rows, int slices, int s) { return rows * s / slices; }

}  // namespace strata::kernel_math
