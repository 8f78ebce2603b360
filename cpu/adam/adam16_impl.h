// The 16-bit-state update (adam16_scalar.cpp's reference) written once over a vector type V
// and included by the AVX2 and AVX-512 files. Every lane does the scalar reference's IEEE
// operations in the same order and the same integer hash, so all three agree bit for bit.
// V provides: F, I, Bad (lanes of f32, of u32, and the non-finite flags), W, and the
// operations used below.
#pragma once
#include <cstdint>

#include "cpu/adam/adam_kernels.h"

namespace strata::cpu::adam_impl {

template <class V>
bool kernel16(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  using F = typename V::F;
  using I = typename V::I;
  const F b1 = V::set1(c.beta1), b2 = V::set1(c.beta2);
  const F omb1 = V::set1(c.one_minus_beta1), omb2 = V::set1(c.one_minus_beta2);
  const F step = V::set1(c.step_size), ibc2 = V::set1(c.inv_sqrt_bc2);
  const F eps = V::set1(c.eps), decay = V::set1(c.decay_mul), l2 = V::set1(c.l2), gs = V::set1(c.grad_scale);
  const I key_lo = V::set1i(c.key_lo), key_p = V::set1i(c.key_p | 1u), lanes = V::lane_index(),
          lo16 = V::set1i(0xffffu);
  typename V::Bad bad = V::no_bad();
  const Sources src(t);
  auto* out = static_cast<uint16_t*>(t.param_out);
  bool nonfinite = false;
  int64_t i = begin;
  for (; i + V::W <= end; i += V::W) {
    const uint64_t gi = uint64_t(t.index_base + i);
    if (uint32_t(gi) > 0xffffffffu - uint32_t(V::W - 1)) {  // the lanes cross a 2^32 boundary
      nonfinite |= kernel16_scalar(t, i, i + V::W, c);
      continue;
    }
    const F raw = V::load_grad(t.grad, t.grad_dtype, i);
    bad = V::flag(bad, raw);
    F p = t.param16 ? V::load16(src.p16 + i) : V::loadf(src.p + i);
    F g = V::mul(raw, gs);
    g = V::fmadd(l2, p, g);
    const F m = V::fmadd(b1, t.m16 ? V::load16(src.m16 + i) : V::loadf(src.m + i), V::mul(omb1, g));
    const F v = V::fmadd(b2, t.v16 ? V::load16(src.v16 + i) : V::loadf(src.v + i), V::mul(V::mul(omb2, g), g));
    const F d = V::fmadd(V::sqrt(v), ibc2, eps);
    p = V::fmadd(step, V::div(m, d), V::mul(p, decay));
    // h = fmix32(lo32(gi) ^ fmix32(hi32(gi) ^ key_hi) ^ key_lo); hi32 is every lane's here.
    const I hk = V::set1i(fmix32(uint32_t(gi >> 32) ^ c.key_hi));
    const I h = V::fmix(V::bxor(V::add(V::set1i(uint32_t(gi)), lanes), V::bxor(hk, key_lo)));
    if (t.m16)
      V::store16(t.m16 + i, V::round(m, V::band(h, lo16), t.stochastic));
    else
      V::storef(t.m + i, m);
    if (t.v16)
      V::store16(t.v16 + i, V::round(v, V::srli16(h), t.stochastic));
    else
      V::storef(t.v + i, v);
    if (t.param16) {
      const I pb = V::round(p, V::srli16(V::mullo(h, key_p)), t.stochastic);
      V::store16(t.param16 + i, pb);
      p = V::widen16(pb);  // the copy-out is the stored master
    } else {
      V::storef(t.param + i, p);
    }
    if (out) {
      if (t.out_dtype == DType::bf16)
        V::store16(out + i, V::round(p, V::set1i(0), false));
      else
        V::store_f16(out + i, p);
    }
  }
  nonfinite |= V::any(bad);
  if (i < end) nonfinite |= kernel16_scalar(t, i, end, c);
  return nonfinite;
}

// The 16-bit update's memory traffic with trivial arithmetic (strata bench adam's bound): f32
// arrays get x += g·k, bf16 ones +1 ulp; the same loads and stores as kernel16.
template <class V>
void stream_bound16(void* p, bool p16, void* m, void* v, bool s16, const float* g, int64_t begin, int64_t end) {
  using F = typename V::F;
  const F a = V::set1(1e-7f), b = V::set1(2e-7f), c = V::set1(3e-7f);
  const auto touch = [](void* x, bool x16, int64_t i, F gv, F k) {
    if (x16) {
      V::bump16(static_cast<uint16_t*>(x) + i);
    } else {
      float* q = static_cast<float*>(x) + i;
      V::storef(q, V::fmadd(gv, k, V::loadf(q)));
    }
  };
  for (int64_t i = begin; i + V::W <= end; i += V::W) {
    const F x = V::loadf(g + i);
    touch(p, p16, i, x, a);
    touch(m, s16, i, x, b);
    touch(v, s16, i, x, c);
  }
}

}  // namespace strata::cpu::adam_impl
