#include "model/model_family.h"

#include <charconv>
#include <cstdlib>

namespace strata {

double shortest_decimal(float f) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, f);
  return std::strtod(std::string(b, r.ptr).c_str(), nullptr);
}

const char* hf_dtype_name(DType dtype) {
  return dtype == DType::f32 ? "float32" : dtype == DType::bf16 ? "bfloat16" : "float16";
}

}  // namespace strata
