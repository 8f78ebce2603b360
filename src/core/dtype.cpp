#include "core/dtype.h"

#include <cstring>

#include "core/error.h"

namespace strata {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::f32;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::f16;
  throw_error("unknown dtype '" + std::string(s) + "'", "use one of f32, bf16, f16");
}

template <typename D, typename S>
static void convert_typed(D* dst, const S* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = from_f32<D>(to_f32(src[i]));
}

template <typename D>
static void convert_from(D* dst, const void* src, DType src_t, size_t n) {
  switch (src_t) {
    case DType::f32:
      return convert_typed(dst, static_cast<const float*>(src), n);
    case DType::bf16:
      return convert_typed(dst, static_cast<const bf16*>(src), n);
    case DType::f16:
      return convert_typed(dst, static_cast<const f16*>(src), n);
  }
}

void convert(void* dst, DType dst_t, const void* src, DType src_t, size_t n) {
  if (dst_t == src_t) {
    std::memmove(dst, src, n * dtype_size(dst_t));
    return;
  }
  switch (dst_t) {
    case DType::f32:
      return convert_from(static_cast<float*>(dst), src, src_t, n);
    case DType::bf16:
      return convert_from(static_cast<bf16*>(dst), src, src_t, n);
    case DType::f16:
      return convert_from(static_cast<f16*>(dst), src, src_t, n);
  }
}

}  // namespace strata
