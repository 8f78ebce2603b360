// The engine's ops on device memory (CPU reference): conversion with accumulation, fills,
// and the global-norm square sum. Host addresses only: CpuBackend translates first.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata::host {

// dst[0, n) = src converted (RNE); with accumulate, dst = round(dst + src) for f32 src.
// Serial: engine streams must not start OpenMP teams that compete with the compute.
void convert_accumulate(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate);
// Σ x² in f64 over fixed chunks summed in order: the same result for any thread count
// (parallel only when asked, on the compute thread).
double sum_squares(const void* x, DType t, int64_t n, bool parallel);

}  // namespace strata::host
