// Device-side helpers shared by the .cu files: typed loads and stores (all arithmetic in
// f32), dtype dispatch, and warp/block reductions in a fixed order (deterministic).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda_check.h"
#include "kernels/math/launch_shape.h"

namespace strata::cuda::launch {

__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
// __float2bfloat16 / __float2half round to nearest even and keep NaN/Inf, as core/dtype.h.
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16(v); }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half(v); }

// Calls f(T*) with T the element type of dtype code t (0 f32, 1 bf16, 2 f16).
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
#define STRATA_ELEM(tag) std::remove_pointer_t<decltype(tag)>

template <typename V>
__device__ __forceinline__ V warp_sum(V v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
template <typename V>
__device__ V block_sum(V v) {
  __shared__ V part[32];
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  V t = lane < warps ? part[lane] : V(0);
  return warp_sum(t);
}
__device__ inline float block_max(float v) {
  __shared__ float part[32];
  v = warp_max(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  float t = lane < warps ? part[lane] : -INFINITY;
  return warp_max(t);
}

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace strata::cuda::launch
