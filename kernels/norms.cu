// LayerNorm and RMSNorm forward and backward (one warp per row; statistics in f32, two
// passes as the CPU reference), and the column sums behind dweight, dbias and the matmul's
// bias gradient: rows cut into fixed slices, one partial row per slice, the partials then
// added in slice order, so every result is the same on every run (no atomics).
#include "kernels/device_common.cuh"
#include "kernels/launch.h"
#include "kernels/math/element_math.h"

namespace strata::cuda::launch {

namespace km = strata::kernel_math;

namespace {

template <typename E>
__global__ void layernorm_kernel(E* out, float* mean, float* rstd, const E* inp, const E* w, const E* b, int64_t N,
                                 int64_t C) {
  const int64_t n = blockIdx.x * int64_t(km::kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const E* x = inp + n * C;
  float s = 0;
  for (int64_t c = lane; c < C; c += 32) s += load(x, c);
  const float m = warp_sum(s) / float(C);
  float v = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = load(x, c) - m;
    v += d * d;
  }
  const float r = km::norm_rstd(warp_sum(v), int(C), km::kLayerNormEps);
  for (int64_t c = lane; c < C; c += 32)
    store(out, n * C + c, km::layernorm_out(load(x, c), m, r, load(w, c), load(b, c)));
  if (lane == 0) mean[n] = m, rstd[n] = r;
}

template <typename E>
__global__ void layernorm_dx_kernel(E* dinp, const E* dout, const E* inp, const E* w, const float* mean,
                                    const float* rstd, int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * int64_t(km::kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const E* x = inp + n * C;
  const E* dy = dout + n * C;
  const float m = mean[n], r = rstd[n];
  float a = 0, b = 0;
  for (int64_t c = lane; c < C; c += 32) {
    const float dnorm = load(w, c) * load(dy, c);
    a += dnorm;
    b += dnorm * (load(x, c) - m) * r;
  }
  const float dnorm_mean = warp_sum(a) / float(C), dnorm_norm_mean = warp_sum(b) / float(C);
  for (int64_t c = lane; c < C; c += 32)
    store(dinp, n * C + c,
          load(dinp, n * C + c) +
              km::layernorm_dx(load(x, c), m, r, load(w, c), load(dy, c), dnorm_mean, dnorm_norm_mean));
}

template <typename E>
__global__ void rmsnorm_kernel(E* out, float* rstd, const E* inp, const E* w, float wofs, float eps, int64_t N,
                               int64_t C) {
  const int64_t n = blockIdx.x * int64_t(km::kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const E* x = inp + n * C;
  float ss = 0;
  for (int64_t c = lane; c < C; c += 32) ss += load(x, c) * load(x, c);
  const float r = km::norm_rstd(warp_sum(ss), int(C), eps);
  for (int64_t c = lane; c < C; c += 32) store(out, n * C + c, km::rmsnorm_out(load(x, c), r, load(w, c) + wofs));
  if (lane == 0) rstd[n] = r;
}

template <typename E>
__global__ void rmsnorm_dx_kernel(E* dinp, const E* dout, const E* inp, const E* w, float wofs, const float* rstd,
                                  int64_t N, int64_t C) {
  const int64_t n = blockIdx.x * int64_t(km::kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const E* x = inp + n * C;
  const E* dy = dout + n * C;
  const float r = rstd[n];
  float dot = 0;
  for (int64_t c = lane; c < C; c += 32) dot += (load(w, c) + wofs) * load(dy, c) * load(x, c) * r;
  dot = warp_sum(dot) / float(C);
  for (int64_t c = lane; c < C; c += 32)
    store(dinp, n * C + c, load(dinp, n * C + c) + km::rmsnorm_dx(load(x, c), r, load(w, c) + wofs, load(dy, c), dot));
}

// What a column sum adds per element: dy (bias), x̂·dy and dy (layernorm), x̂·dy (rmsnorm).
enum class ColumnTerm { plain, layernorm, rmsnorm };

// grid (column strips, slices): partial[slice][c] (and [slice][C + c] for the layernorm's
// dbias) over the slice's rows.
template <ColumnTerm K, typename E>
__global__ void column_partial_kernel(float* partial, const E* dy, const E* x, const float* mean, const float* rstd,
                                      int64_t N, int64_t C, int slices) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int s = blockIdx.y;
  if (c >= C) return;
  const int64_t lo = km::slice_begin(N, slices, s), hi = km::slice_begin(N, slices, s + 1);
  float a = 0, b = 0;
  for (int64_t n = lo; n < hi; ++n) {
    const float g = load(dy, n * C + c);
    if constexpr (K == ColumnTerm::plain) {
      a += g;
    } else if constexpr (K == ColumnTerm::layernorm) {
      a += (load(x, n * C + c) - mean[n]) * rstd[n] * g;
      b += g;
    } else {
      a += load(x, n * C + c) * rstd[n] * g;
    }
  }
  partial[int64_t(s) * C + c] = a;
  if constexpr (K == ColumnTerm::layernorm) partial[int64_t(slices) * C + int64_t(s) * C + c] = b;
}

__global__ void column_finish_kernel(float* out_a, float* out_b, const float* partial, int64_t C, int slices) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float a = 0, b = 0;
  for (int s = 0; s < slices; ++s) {
    a += partial[int64_t(s) * C + c];
    if (out_b) b += partial[int64_t(slices) * C + int64_t(s) * C + c];
  }
  out_a[c] += a;
  if (out_b) out_b[c] += b;
}

template <ColumnTerm K, typename E>
void column_sums(float* out_a, float* out_b, const E* dy, const E* x, const float* mean, const float* rstd, int64_t N,
                 int64_t C, void* scratch, cudaStream_t s) {
  const int slices = km::column_slices(N);
  const dim3 grid(unsigned((C + km::kThreads - 1) / km::kThreads), unsigned(slices));
  float* partial = static_cast<float*>(scratch);
  column_partial_kernel<K, E><<<grid, km::kThreads, 0, s>>>(partial, dy, x, mean, rstd, N, C, slices);
  STRATA_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<unsigned((C + km::kThreads - 1) / km::kThreads), km::kThreads, 0, s>>>(out_a, out_b, partial,
                                                                                                C, slices);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace

void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias,
                       int64_t N, int64_t C, int dtype, void* stream) {
  if (N == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    layernorm_kernel<<<km::grid_for_rows(N), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(out), mean, rstd, static_cast<const E*>(inp), static_cast<const E*>(weight),
        static_cast<const E*>(bias), N, C);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp, const void* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, int dtype, void* scratch,
                        void* stream) {
  if (N == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    const E* dy = static_cast<const E*>(dout);
    const E* x = static_cast<const E*>(inp);
    layernorm_dx_kernel<<<km::grid_for_rows(N), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(dinp), dy, x, static_cast<const E*>(weight), mean, rstd, N, C);
    STRATA_CUDA_CHECK_LAUNCH();
    column_sums<ColumnTerm::layernorm>(dweight, dbias, dy, x, mean, rstd, N, C, scratch, as_stream(stream));
  });
}

void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, float weight_offset, float eps,
                     int64_t N, int64_t C, int dtype, void* stream) {
  if (N == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    rmsnorm_kernel<<<km::grid_for_rows(N), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(out), rstd, static_cast<const E*>(inp), static_cast<const E*>(weight), weight_offset, eps, N,
        C);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp, const void* weight,
                      float weight_offset, const float* rstd, int64_t N, int64_t C, int dtype, void* scratch,
                      void* stream) {
  if (N == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    const E* dy = static_cast<const E*>(dout);
    const E* x = static_cast<const E*>(inp);
    rmsnorm_dx_kernel<<<km::grid_for_rows(N), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(dinp), dy, x, static_cast<const E*>(weight), weight_offset, rstd, N, C);
    STRATA_CUDA_CHECK_LAUNCH();
    column_sums<ColumnTerm::rmsnorm>(dweight, nullptr, dy, x, nullptr, rstd, N, C, scratch, as_stream(stream));
  });
}

void column_sum(float* dbias, const void* dout, int64_t N, int64_t C, int dtype, void* scratch, void* stream) {
  if (N == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    column_sums<ColumnTerm::plain>(dbias, nullptr, static_cast<const E*>(dout), static_cast<const E*>(nullptr), nullptr,
                                   nullptr, N, C, scratch, as_stream(stream));
  });
}

}  // namespace strata::cuda::launch
