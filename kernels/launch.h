// Raw-pointer kernel launchers (implemented in *.cu). dtype codes follow strata::DType:
// 0 = f32, 1 = bf16, 2 = f16. Callers go through cuda_ops.h, which checks the views.
#pragma once
#include <cstdint>

namespace strata::cuda::launch {

void residual(void* out, const void* a, const void* b, int64_t n, int dtype, void* stream);
void cast(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, void* stream);

}  // namespace strata::cuda::launch
