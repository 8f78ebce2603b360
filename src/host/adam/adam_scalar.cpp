// Scalar reference kernel (and the tail of the vector kernels). Built for the baseline ISA;
// std::fma is exact (glibc uses the FMA instruction where the CPU has one).
#include <cmath>
#include <cstring>

#include "host/adam/adam_kernels.h"

namespace strata::host::adam_impl {

bool kernel_scalar(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  bool nonfinite = false;
  const float* p_src = t.param_in ? t.param_in : t.param;
  const float* m_src = t.m_in ? t.m_in : t.m;
  const float* v_src = t.v_in ? t.v_in : t.v;
  for (int64_t i = begin; i < end; ++i) {
    const float raw = load_grad_f32(t.grad, t.grad_dtype, i);
    uint32_t bits;
    std::memcpy(&bits, &raw, 4);
    nonfinite |= (bits & 0x7f800000u) == 0x7f800000u;
    float p = p_src[i];
    float g = raw * c.grad_scale;
    g = std::fma(c.l2, p, g);
    const float m = std::fma(c.beta1, m_src[i], c.one_minus_beta1 * g);
    const float v = std::fma(c.beta2, v_src[i], (c.one_minus_beta2 * g) * g);
    const float d = std::fma(std::sqrt(v), c.inv_sqrt_bc2, c.eps);
    p = std::fma(c.step_size, m / d, p * c.decay_mul);
    t.param[i] = p, t.m[i] = m, t.v[i] = v;
    if (t.param_out) {
      auto* o = static_cast<uint16_t*>(t.param_out);
      o[i] = t.out_dtype == DType::bf16 ? f32_to_bf16(p) : f32_to_f16(p);
    }
  }
  return nonfinite;
}

}  // namespace strata::host::adam_impl
