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

}  // namespace strata
