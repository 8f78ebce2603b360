// Internal: the per-ISA kernels behind adam_step and the per-step constants they share.
#pragma once
#include <cstdint>

#include "cpu/adam/adam.h"

namespace strata::cpu::adam_impl {

// Everything per-step is folded into constants once, so the kernels do the same arithmetic:
//   g  = grad·grad_scale;  g += l2·p            (Adam-L2 only; l2 = 0 otherwise)
//   m  = fma(β1, m, (1-β1)·g)
//   v  = fma(β2, v, ((1-β2)·g)·g)
//   d  = fma(sqrt(v), 1/sqrt(1-β2^t), eps)
//   p  = fma(-lr/(1-β1^t), m/d, p·(1 - lr·wd))  (decay_mul = 1 for Adam-L2)
struct Consts {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size;     // -lr / (1 - β1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - β2^t)
  float eps, decay_mul, l2, grad_scale;
};

// Updates [begin, end); returns true if a non-finite gradient was seen.
using KernelFn = bool (*)(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);

bool kernel_scalar(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);
bool kernel_avx2(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);
bool kernel_avx512(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);

// The bound for this access pattern (read 4 f32 arrays, write 3 back in place), used by
// `strata bench adam`; same tiles and threads as the kernel.
void stream_bound_avx2(float* p, float* m, float* v, const float* g, int64_t begin, int64_t end);
void stream_bound_avx512(float* p, float* m, float* v, const float* g, int64_t begin, int64_t end);

}  // namespace strata::cpu::adam_impl
