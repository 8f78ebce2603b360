// Argument checks shared by every backend's ops: a tensor's element count and dtype against
// what the op expects, with an error naming the op and the argument.
#pragma once
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/tensor.h"

namespace strata {

inline int64_t last_dim(const TensorView& v) { return v.shape[v.shape.rank - 1]; }
// Checks that a view has the expected element count, naming the op and argument.
void expect_numel(const TensorView& v, int64_t n, const char* op, const char* arg);
void expect_dtype(const TensorView& v, DType t, const char* op, const char* arg);
// Packed-row positions (Backend::encoder_forward): empty, or B·T of them, each row's counting
// 0, 1, … from every record's first row (kernels/math/segment_math.h).
// A column block x [N, w] of y [N, W] at column `first` (Backend::add_columns): inside the
// rows, one dtype. Returns {N, w, W}.
struct ColumnBlock {
  int64_t N, w, W;
};
ColumnBlock check_columns(const TensorView& y, const TensorView& x, int64_t first, const char* op);
void check_positions(std::span<const int32_t> positions, int64_t B, int64_t T, const char* op);

}  // namespace strata
