// The Llama-family kernels: rotary embeddings from a table built once per shape, and the
// grouped-query expansion around the fused attention (and its reduction back).
#include "kernels/device_common.cuh"
#include "kernels/launch.h"
#include "kernels/math/element_math.h"

namespace strata::cuda::launch {

namespace km = strata::kernel_math;

namespace {

__global__ void rope_table_kernel(float* table, int64_t T, int head_dim, float theta) {
  const int half = head_dim / 2;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < T * half; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = k / half;
    const int i = int(k % half);
    const float a = km::rope_angle(int(t), i, head_dim, theta);
    table[2 * k] = cosf(a);
    table[2 * k + 1] = sinf(a);
  }
}

// One thread per (row, head, pair).
template <typename T>
__global__ void rope_kernel(T* x, const float* table, int64_t BT, int64_t Tlen, int64_t W, int first_head, int heads,
                            int head_dim, float sign) {
  const int half = head_dim / 2;
  const int64_t total = BT * heads * half;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(k % half);
    const int h = int((k / half) % heads) + first_head;
    const int64_t n = k / (int64_t(half) * heads), t = n % Tlen;
    const int64_t base = n * W + int64_t(h) * head_dim;
    float a = load(x, base + i), b = load(x, base + i + half);
    km::rope_rotate(&a, &b, table[2 * (t * half + i)], sign * table[2 * (t * half + i) + 1]);
    store(x, base + i, a);
    store(x, base + i + half, b);
  }
}

// packed [N, 3·NH·d] from fused [N, (NH + 2·NKV)·d]: one thread per packed element.
template <typename T>
__global__ void gqa_expand_kernel(T* packed, const T* fused, int64_t N, int NH, int NKV, int d) {
  const int64_t Wp = int64_t(3) * NH * d, Wf = int64_t(NH + 2 * NKV) * d, g = NH / NKV;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < N * Wp; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / Wp, c = k % Wp, part = c / (int64_t(NH) * d), h = (c / d) % NH, i = c % d;
    const int64_t src = part == 0 ? c : int64_t(NH) * d + (part - 1) * int64_t(NKV) * d + (h / g) * d + i;
    packed[k] = fused[n * Wf + src];
  }
}

// dfused from dpacked: dq copied, each kv head's gradient summed over its g query heads in
// head order (f32), as the CPU reference.
template <typename T>
__global__ void gqa_reduce_kernel(T* dfused, const T* dpacked, int64_t N, int NH, int NKV, int d) {
  const int64_t Wp = int64_t(3) * NH * d, Wf = int64_t(NH + 2 * NKV) * d, g = NH / NKV;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < N * Wf; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / Wf, c = k % Wf;
    const T* p = dpacked + n * Wp;
    if (c < int64_t(NH) * d) {
      dfused[k] = p[c];
      continue;
    }
    const int64_t part = 1 + (c - int64_t(NH) * d) / (int64_t(NKV) * d), j = ((c - int64_t(NH) * d) / d) % NKV,
                  i = c % d;
    float s = 0;
    for (int64_t r = 0; r < g; ++r) s += load(p, part * NH * d + (j * g + r) * d + i);
    store(dfused, k, s);
  }
}

}  // namespace

void rope_table(float* table, int64_t T, int head_dim, float theta, void* stream) {
  const int64_t n = T * (head_dim / 2);
  if (n == 0) return;
  rope_table_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(table, T, head_dim, theta);
  STRATA_CUDA_CHECK_LAUNCH();
}

void rope(void* x, const float* table, int64_t BT, int64_t T, int64_t W, int first_head, int heads, int head_dim,
          bool inverse, int dtype, void* stream) {
  const int64_t n = BT * heads * (head_dim / 2);
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    rope_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(x), table, BT, T, W, first_head, heads, head_dim, inverse ? -1.0f : 1.0f);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void gqa_expand(void* packed, const void* fused, int64_t N, int n_head, int n_kv_head, int head_dim, int dtype,
                void* stream) {
  const int64_t n = N * 3 * n_head * head_dim;
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    gqa_expand_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(packed), static_cast<const E*>(fused), N, n_head, n_kv_head, head_dim);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void gqa_reduce(void* dfused, const void* dpacked, int64_t N, int n_head, int n_kv_head, int head_dim, int dtype,
                void* stream) {
  const int64_t n = N * (n_head + 2 * n_kv_head) * head_dim;
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    gqa_reduce_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(dfused), static_cast<const E*>(dpacked), N, n_head, n_kv_head, head_dim);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::launch
