// The device shard's optimizer work: the fused AdamW (the CPU scalar kernel's arithmetic,
// kernels/math/element_math.h) and the gradients' square sum in f64 over the CPU backend's
// fixed chunks, so the order of the partial sums depends on n alone.
#include "kernels/device_common.cuh"
#include "kernels/launch.h"
#include "kernels/math/adam16_math.h"
#include "kernels/math/element_math.h"

namespace strata::cuda::launch {

namespace km = strata::kernel_math;

namespace {

template <typename E>
__global__ void square_chunk_kernel(double* partial, const E* x, int64_t n, int64_t chunk) {
  const int64_t lo = blockIdx.x * chunk, hi = min(n, lo + chunk);
  double s = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    const double v = double(load(x, i));
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void square_finish_kernel(double* out, const double* partial, int64_t chunks, bool accumulate) {
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];  // in chunk order, as the CPU
  *out = accumulate ? *out + total : total;
}

// The updated parameter in the compute dtype, when asked for.
__device__ void store_copy_out(const AdamLaunch& a, int64_t i, float p) {
  if (a.param_out) {
    if (a.out_dtype == 1)
      store(static_cast<__nv_bfloat16*>(a.param_out), i, p);
    else if (a.out_dtype == 2)
      store(static_cast<__half*>(a.param_out), i, p);
    else
      store(static_cast<float*>(a.param_out), i, p);
  }
}

template <typename G>
__global__ void adamw_kernel(AdamLaunch a, const G* grad, int32_t* nonfinite) {
  km::AdamConsts c{a.beta1,        a.beta2, a.one_minus_beta1, a.one_minus_beta2, a.step_size,
                   a.inv_sqrt_bc2, a.eps,   a.decay_mul,       a.grad_scale};
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    float p = a.param[i], m = a.m[i], v = a.v[i];
    bad |= !km::adamw_element(&p, &m, &v, load(grad, i), c);
    a.param[i] = p, a.m[i] = m, a.v[i] = v;
    store_copy_out(a, i, p);
  }
  if (bad && nonfinite) *nonfinite = 1;  // every writer writes the same value
}

// The same with any of master, m and v in bf16: widened, updated as above, rounded back
// once with the CPU Adam's random bits, so the device's 16-bit states are the CPU kernel's bit
// for bit (kernel_math::adamw16_element).
template <typename G>
__global__ void adamw16_kernel(AdamLaunch a, const G* grad, int32_t* nonfinite) {
  km::AdamConsts c{a.beta1,        a.beta2, a.one_minus_beta1, a.one_minus_beta2, a.step_size,
                   a.inv_sqrt_bc2, a.eps,   a.decay_mul,       a.grad_scale};
  const km::Adam16Keys keys{a.key_lo, a.key_hi, a.key_p};
  bool bad = false;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = km::adam16_hash(uint64_t(a.index_base + i), keys);
    float p;
    bad |= !km::adamw16_element(a.param16 ? nullptr : a.param + i, a.param16 ? a.param16 + i : nullptr,
                                a.m16 ? nullptr : a.m + i, a.m16 ? a.m16 + i : nullptr, a.v16 ? nullptr : a.v + i,
                                a.v16 ? a.v16 + i : nullptr, load(grad, i), c, h, keys.p, a.stochastic, &p);
    store_copy_out(a, i, p);
  }
  if (bad && nonfinite) *nonfinite = 1;
}

}  // namespace

void sum_squares(double* out, const void* x, int dtype, int64_t n, bool accumulate, void* scratch, void* stream) {
  const int64_t chunks = km::square_chunks(n);
  double* partial = static_cast<double*>(scratch);
  if (chunks > 0) {
    dispatch(dtype, [&](auto* tag) {
      using E = STRATA_ELEM(tag);
      square_chunk_kernel<<<unsigned(chunks), km::kThreads, 0, as_stream(stream)>>>(partial, static_cast<const E*>(x),
                                                                                    n, km::square_chunk(n));
    });
    STRATA_CUDA_CHECK_LAUNCH();
  }
  square_finish_kernel<<<1, 32, 0, as_stream(stream)>>>(out, partial, chunks, accumulate);
  STRATA_CUDA_CHECK_LAUNCH();
}

void adamw(const AdamLaunch& a, int32_t* nonfinite, void* stream) {
  if (a.n == 0) return;
  dispatch(a.grad_dtype, [&](auto* tag) {
    using G = STRATA_ELEM(tag);
    if (a.m16 || a.v16 || a.param16)
      adamw16_kernel<<<km::grid_for(a.n), km::kThreads, 0, as_stream(stream)>>>(a, static_cast<const G*>(a.grad),
                                                                                nonfinite);
    else
      adamw_kernel<<<km::grid_for(a.n), km::kThreads, 0, as_stream(stream)>>>(a, static_cast<const G*>(a.grad),
                                                                              nonfinite);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::launch
