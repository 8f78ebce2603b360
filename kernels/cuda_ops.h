// CUDA kernels with the same contract as their CPU references in cpu/ops.h (views hold
// device pointers; `stream` is a cudaStream_t, nullptr for the default stream). Included
// from plain C++: no CUDA headers here.
#pragma once
#include <string>

#include "core/tensor.h"

namespace strata::cuda {

// Number of usable CUDA devices; 0 with `why` set when there are none (no driver, no GPU).
int device_count(std::string* why = nullptr);

// out = a + b (f32 or bf16), as cpu::residual_forward.
void residual_forward(TensorView out, TensorView a, TensorView b, void* stream);
// dst = src converted (f32 <-> bf16/f16, round to nearest even), as cpu::cast.
void cast(TensorView dst, TensorView src, void* stream);

}  // namespace strata::cuda
