// Elementwise kernels: residual add and dtype casts. bf16/f16 arithmetic happens in f32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/launch.h"

namespace strata::cuda::launch {

namespace {

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
// __float2bfloat16 / __float2half round to nearest even and keep NaN/Inf, as core/dtype.h.
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half(v); }

template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store(out, i, load(a, i) + load(b, i));
}

template <typename D, typename S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    store(dst, i, load(src, i));
}

int grid_for(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 65535)); }

template <typename F>
void dispatch(int t, F&& f) {
  switch (t) {
    case 0:
      return f(static_cast<float*>(nullptr));
    case 1:
      return f(static_cast<__nv_bfloat16*>(nullptr));
    default:
      return f(static_cast<__half*>(nullptr));
  }
}

}  // namespace

void residual(void* out, const void* a, const void* b, int64_t n, int dtype, void* stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    residual_kernel<<<grid_for(n), 256, 0, cudaStream_t(stream)>>>(static_cast<T*>(out), static_cast<const T*>(a),
                                                                   static_cast<const T*>(b), n);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void cast(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, void* stream) {
  if (n == 0) return;
  dispatch(dst_dtype, [&](auto* dtag) {
    dispatch(src_dtype, [&](auto* stag) {
      using D = std::remove_pointer_t<decltype(dtag)>;
      using S = std::remove_pointer_t<decltype(stag)>;
      cast_kernel<<<grid_for(n), 256, 0, cudaStream_t(stream)>>>(static_cast<D*>(dst), static_cast<const S*>(src), n);
    });
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::launch
