// Internal: the per-ISA kernels behind adam_step and the per-step constants they share.
#pragma once
#include <cstdint>

#include "host/adam/adam.h"
#include "kernels/math/adam16_math.h"

namespace strata::host::adam_impl {

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
  uint32_t key_lo, key_hi, key_p;  // the 16-bit states' rounding keys, from (seed, step)
};

// Gradient i widened to f32 (the scalar kernels' load).
inline float load_grad_f32(const void* g, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(g)[i];
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(g)[i]);
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(g)[i]);
  }
  return 0;
}

// The arrays an update reads: the _in twins when given (out of place), else the states.
struct Sources {
  const float *p, *m, *v;
  const uint16_t *p16, *m16, *v16;
  explicit Sources(const AdamTensors& t)
      : p(t.param_in ? t.param_in : t.param),
        m(t.m_in ? t.m_in : t.m),
        v(t.v_in ? t.v_in : t.v),
        p16(t.param16_in ? t.param16_in : t.param16),
        m16(t.m16_in ? t.m16_in : t.m16),
        v16(t.v16_in ? t.v16_in : t.v16) {}
};

// Updates [begin, end); returns true if a non-finite gradient was seen.
using KernelFn = bool (*)(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);

bool kernel_scalar(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);
bool kernel_avx2(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);
bool kernel_avx512(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);

// The same update on 16-bit states (AdamTensors::m16/v16/param16), bit-identical across ISAs.
bool kernel16_scalar(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);
bool kernel16_avx2(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);
bool kernel16_avx512(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c);

// Stochastic rounding's random bits and the rounding itself: kernels/math/adam16_math.h,
// shared with the CUDA AdamW on bf16 moments.
using kernel_math::fmix32;

// The bound for this access pattern (read 4 f32 arrays, write 3 back in place), used by
// `strata bench adam`; same tiles and threads as the kernel.
void stream_bound_avx2(float* p, float* m, float* v, const float* g, int64_t begin, int64_t end);
void stream_bound_avx512(float* p, float* m, float* v, const float* g, int64_t begin, int64_t end);
// The same with the master (p16) and/or m and v (s16) in bf16, the gradient in gdt: the 16-bit
// update's pattern.
void stream_bound16_avx2(void* p, bool p16, void* m, void* v, bool s16, const void* g, DType gdt, int64_t begin,
                         int64_t end);
void stream_bound16_avx512(void* p, bool p16, void* m, void* v, bool s16, const void* g, DType gdt, int64_t begin,
                           int64_t end);

}  // namespace strata::host::adam_impl
