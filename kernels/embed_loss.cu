// The embedding (token + position) forward and backward, and the fused softmax
// cross-entropy with its loss sum. Token ids arrive on the device already checked against
// the vocabulary by the backend (on the host, before the upload).
#include "kernels/device_common.cuh"
#include "kernels/launch.h"
#include "kernels/math/element_math.h"

namespace strata::cuda::launch {

namespace km = strata::kernel_math;

namespace {

template <typename E>
__global__ void encoder_kernel(E* out, const int32_t* tokens, const int32_t* pos, const E* wte, const E* wpe, int64_t N,
                               int64_t T, int64_t C) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < N * C; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / C, c = k % C;
    const float a = load(wte, int64_t(tokens[n]) * C + c);
    store(out, k, wpe ? a + load(wpe, (pos ? pos[n] : n % T) * C + c) : a);
  }
}

// One thread per channel walks the rows in order: repeated tokens never race, and the sum
// order is the CPU reference's.
template <typename E>
__global__ void encoder_backward_kernel(float* dwte, float* dwpe, const E* dout, const int32_t* tokens,
                                        const int32_t* pos, int64_t N, int64_t T, int64_t C) {
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < C; c += int64_t(gridDim.x) * blockDim.x)
    for (int64_t n = 0; n < N; ++n) {
      const float g = load(dout, n * C + c);
      dwte[int64_t(tokens[n]) * C + c] += g;
      if (dwpe) dwpe[(pos ? pos[n] : n % T) * C + c] += g;
    }
}

// One block per row: the row's maximum, Σ exp(x - max) in f64, then the gradient in place.
// With a soft-cap the logits are capped as they are read (each pass recomputes it from the
// raw logit, which stays until its gradient overwrites it) and the gradient carries 1 - tanh².
__global__ void cross_entropy_kernel(float* losses, float* logits, const int32_t* targets, int64_t Vp, int vocab,
                                     float dloss, float cap) {
  const int64_t n = blockIdx.x;
  float* row = logits + n * Vp;
  const int32_t t = targets[n];
  if (t < 0) {  // masked position: contributes nothing
    for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) row[v] = 0;
    if (threadIdx.x == 0) losses[n] = 0;
    return;
  }
  float mx = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) mx = fmaxf(mx, km::softcapped(row[v], cap));
  mx = block_max(mx);
  double s = 0;
  for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) s += double(expf(km::softcapped(row[v], cap) - mx));
  s = block_sum(s);
  const float target_logit = km::softcapped(row[t], cap);
  __syncthreads();  // every thread has read row[t] before it is overwritten
  for (int64_t v = threadIdx.x; v < Vp; v += blockDim.x) {
    const float c = km::softcapped(row[v], cap);
    row[v] = v < vocab ? km::cross_entropy_grad(c, mx, s, dloss, v == t) * km::softcap_grad(c, cap) : 0.0f;
  }
  if (threadIdx.x == 0) losses[n] = float(km::cross_entropy_loss(mx, s, target_logit));
}

// One block adds the rows' losses in a fixed order.
__global__ void loss_sum_kernel(double* loss_sum, const float* losses, int64_t N, double scale) {
  double s = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) s += double(losses[n]);
  s = block_sum(s);
  if (threadIdx.x == 0) *loss_sum += s * scale;
}

}  // namespace

void encoder_forward(void* out, const int32_t* tokens, const int32_t* pos, const void* wte, const void* wpe, int64_t N,
                     int64_t T, int64_t C, int dtype, void* stream) {
  if (N * C == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    encoder_kernel<<<km::grid_for(N * C), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(out), tokens, pos, static_cast<const E*>(wte), static_cast<const E*>(wpe), N, T, C);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void encoder_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, const int32_t* pos, int64_t N,
                      int64_t T, int64_t C, int dtype, void* stream) {
  if (N * C == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    encoder_backward_kernel<<<km::grid_for(C), km::kThreads, 0, as_stream(stream)>>>(
        dwte, dwpe, static_cast<const E*>(dout), tokens, pos, N, T, C);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t Vp, int vocab, float dloss,
                   double* loss_sum, double loss_divisor, double loss_weight, float softcap, void* stream) {
  if (N == 0) return;
  cross_entropy_kernel<<<unsigned(N), 1024, 0, as_stream(stream)>>>(losses, logits, targets, Vp, vocab, dloss, softcap);
  STRATA_CUDA_CHECK_LAUNCH();
  if (!loss_sum) return;
  loss_sum_kernel<<<1, 1024, 0, as_stream(stream)>>>(loss_sum, losses, N, loss_weight / loss_divisor);
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::launch
