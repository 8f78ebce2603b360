#include "backend/op_checks.h"

#include <string>

#include "core/error.h"

namespace strata {

void expect_numel(const TensorView& v, int64_t n, const char* op, const char* arg) {
  STRATA_CHECK(v.numel() == n,
               std::string(op) + ": " + arg + " has shape " + v.shape.str() + " (" + std::to_string(v.numel()) +
                   " elements), expected " + std::to_string(n),
               "this is a bug in the caller: shapes must agree");
}

void expect_dtype(const TensorView& v, DType t, const char* op, const char* arg) {
  STRATA_CHECK(v.dtype == t,
               std::string(op) + ": " + arg + " is " + std::string(dtype_name(v.dtype)) + ", expected " +
                   std::string(dtype_name(t)),
               "this is a bug in the caller: dtypes must agree");
}

ColumnBlock check_columns(const TensorView& y, const TensorView& x, int64_t first, const char* op) {
  const int64_t W = last_dim(y), w = last_dim(x), N = y.numel() / W;
  STRATA_CHECK(x.dtype == y.dtype && first >= 0 && first + w <= W && x.numel() == N * w,
               std::string(op) + ": columns [" + std::to_string(first) + ", +" + std::to_string(w) + ") of " +
                   y.shape.str() + " with " + x.shape.str(),
               "this is a bug in the caller: the block must lie inside the wider rows, in one dtype");
  return {N, w, W};
}

void check_positions(std::span<const int32_t> positions, int64_t B, int64_t T, const char* op) {
  if (positions.empty()) return;
  STRATA_CHECK(int64_t(positions.size()) == B * T,
               std::string(op) + ": " + std::to_string(positions.size()) + " positions for " + std::to_string(B) +
                   " rows of " + std::to_string(T),
               "this is a bug in the caller: give one position per token");
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int32_t p = positions[size_t(b * T + t)], prev = t ? positions[size_t(b * T + t - 1)] : 0;
      STRATA_CHECK(p == 0 || (t > 0 && p == prev + 1),
                   std::string(op) + ": position " + std::to_string(p) + " at row " + std::to_string(b) + ", token " +
                       std::to_string(t) + " neither starts a record (0) nor follows " + std::to_string(prev),
                   "this is a bug in the caller: a record's positions count 0, 1, 2, …");
    }
}

}  // namespace strata
