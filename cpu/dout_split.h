// An f32 output gradient as bf16 terms for the native 16-bit GEMMs: the LM head's
// backward (cpu/ops_matmul.cpp) runs on hi = bf16(dout) and lo = dout − hi, where lo carries
// the bits bf16 drops. Both are written transposed, [columns, rows], which is how oneDNN's
// AMX matmul reads dW += doutᵀ·inp fastest (for 4096×768×1024 blocks, much faster than from
// dout stored untransposed, at a smaller cost to dinp's product, which then reads it
// transposed).
//
// lo is wanted only where it is large in absolute terms. A cross-entropy's gradient
// row, (softmax − one-hot)/rows, has one element near −1/rows and the rest near p/rows: the
// bits that matter are the target's (rounding p − 1 to bf16 loses p whole) and a few large
// p's. So lo is also kept sparse: per row, the elements above kSparseLoFraction of the row's
// largest magnitude, in f32 (exact): dinp adds their rows of W, and dW their rows of the
// input, instead of two more GEMMs (then lo is never written). A row with more of them than
// kSparseLoPerRow in a block (a gradient without that shape) sends the block down the dense
// path: lo in bf16, as the second GEMM of each product.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

// An element's lo is dropped below this fraction of its row's largest magnitude: a bf16
// rounding leaves at most 2^-8 of a value, so each dropped lo is under 2^-18 of that largest
// magnitude, less than the dense bf16 lo leaves of the largest element itself (up to 2^-16).
constexpr float kSparseLoFraction = 0x1p-10f;
constexpr int64_t kSparseLoPerRow = 64;  // per row and block of columns

struct SparseLo {
  float* threshold;  // [N]: kSparseLoFraction · max |row|
  int32_t* count;    // [N]
  int32_t* column;   // [N, kSparseLoPerRow], within the block
  float* value;      // [N, kSparseLoPerRow]: dout − bf16(dout), exact
};

// The scratch for N rows: the thresholds, counts and entries, in bytes.
size_t sparse_lo_bytes(int64_t N);
SparseLo sparse_lo_in(void* scratch, int64_t N);

// threshold[n] = kSparseLoFraction · max_v |x[n, v]| over the whole row (v < cols).
void sparse_lo_thresholds(SparseLo& s, const float* x, int64_t ldx, int64_t N, int64_t cols);

// For rows n < N and columns v < vc of x (row stride ldx): hi[v, n] = bf16(x[n, v]) and, with
// lo, lo[v, n] = bf16(x[n, v] − hi) (convert_from_f32's rounding: to nearest even, NaN kept).
// With sparse, also the entries above each row's threshold; false when a row had more than
// kSparseLoPerRow (the entries are then incomplete).
bool split_bf16_transposed(bf16* hi, bf16* lo, SparseLo* sparse, const float* x, int64_t ldx, int64_t N, int64_t vc);

// acc[n, :C] += Σ value · w[column, :C] over row n's entries (w: the block's rows, row stride C).
void add_sparse_lo(float* acc, const SparseLo& s, const bf16* w, int64_t N, int64_t C);

// dw[column, :C] += value · x[n, :C] for every entry of every row n (dw: the block's vc rows of
// dW, row stride C). Each thread owns a range of columns and takes the entries in row order,
// so every row of dW sums in the same order at any thread count.
void add_sparse_lo_dw(float* dw, const SparseLo& s, const bf16* x, int64_t N, int64_t C, int64_t vc);

}  // namespace strata::cpu
