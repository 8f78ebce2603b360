// The 16-bit-state update's scalar reference (and the vector kernels' tails and the vectors
// whose indices cross a 2^32 boundary): adam_kernels.h's arithmetic on widened states, each
// state rounded back once (stochastically or to nearest).
#include <cmath>
#include <cstring>

#include "host/adam/adam_kernels.h"

namespace strata::host::adam_impl {

using kernel_math::round_state;

bool kernel16_scalar(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  bool nonfinite = false;
  const Sources src(t);
  for (int64_t i = begin; i < end; ++i) {
    const float raw = load_grad_f32(t.grad, t.grad_dtype, i);
    uint32_t bits;
    std::memcpy(&bits, &raw, 4);
    nonfinite |= (bits & 0x7f800000u) == 0x7f800000u;
    float p = t.param16 ? bf16_to_f32(src.p16[i]) : src.p[i];
    float g = raw * c.grad_scale;
    g = std::fma(c.l2, p, g);
    const float m = std::fma(c.beta1, t.m16 ? bf16_to_f32(src.m16[i]) : src.m[i], c.one_minus_beta1 * g);
    const float v = std::fma(c.beta2, t.v16 ? bf16_to_f32(src.v16[i]) : src.v[i], (c.one_minus_beta2 * g) * g);
    const float d = std::fma(std::sqrt(v), c.inv_sqrt_bc2, c.eps);
    p = std::fma(c.step_size, m / d, p * c.decay_mul);
    const uint64_t gi = uint64_t(t.index_base + i);
    const uint32_t h = kernel_math::adam16_hash(gi, {c.key_lo, c.key_hi, c.key_p});
    if (t.m16)
      t.m16[i] = round_state(m, h & 0xffffu, t.stochastic);
    else
      t.m[i] = m;
    if (t.v16)
      t.v16[i] = round_state(v, h >> 16, t.stochastic);
    else
      t.v[i] = v;
    uint16_t pb = 0;
    if (t.param16) {
      pb = round_state(p, (h * (c.key_p | 1u)) >> 16, t.stochastic);
      t.param16[i] = pb;
      p = bf16_to_f32(pb);  // the copy-out is the stored master
    } else {
      t.param[i] = p;
    }
    if (t.param_out) {
      auto* o = static_cast<uint16_t*>(t.param_out);
      o[i] = t.out_dtype == DType::bf16 ? (t.param16 ? pb : f32_to_bf16(p)) : f32_to_f16(p);
    }
  }
  return nonfinite;
}

}  // namespace strata::host::adam_impl
