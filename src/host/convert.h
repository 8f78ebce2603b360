// Vectorised dtype conversions (AVX2/F16C; the cpu target is built for x86-64-v3).
// Same contract as strata::convert in core: round to nearest even, NaN stays NaN.
#pragma once
#include <cstddef>

#include "core/dtype.h"

namespace strata::host {

void convert_to_f32(float* dst, const void* src, DType src_t, size_t n);
void convert_from_f32(void* dst, DType dst_t, const float* src, size_t n);
// Any to any, parallel over large arrays.
void convert_parallel(void* dst, DType dst_t, const void* src, DType src_t, size_t n);

}  // namespace strata::host
