// The 16-bit-state update (adam16_scalar.cpp's reference) written once over a vector type V
// and included by the AVX2 and AVX-512 files. Every lane does the scalar reference's IEEE
// operations in the same order and the same integer hash, so all three agree bit for bit.
// V provides: F, I, Bad (lanes of f32, of u32, and the non-finite flags), W, and the
// operations used below.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "host/adam/adam_kernels.h"

namespace strata::host::adam_impl {

template <class V>
bool kernel16(const AdamTensors& t, int64_t begin, int64_t end, const Consts& c) {
  using F = typename V::F;
  using I = typename V::I;
  constexpr int64_t W = V::W;
  const F b1 = V::set1(c.beta1), b2 = V::set1(c.beta2);
  const F omb1 = V::set1(c.one_minus_beta1), omb2 = V::set1(c.one_minus_beta2);
  const F step = V::set1(c.step_size), ibc2 = V::set1(c.inv_sqrt_bc2);
  const F eps = V::set1(c.eps), decay = V::set1(c.decay_mul), l2 = V::set1(c.l2), gs = V::set1(c.grad_scale);
  const I key_p = V::set1i(c.key_p | 1u), lo16 = V::set1i(0xffffu), zero = V::set1i(0);
  const I lanes[2] = {V::lane_index(), V::add(V::lane_index(), V::set1i(uint32_t(W)))};
  typename V::Bad bad = V::no_bad();
  const Sources src(t);
  auto* out = static_cast<uint16_t*>(t.param_out);
  const bool sr = t.stochastic;
  bool nonfinite = false;
  uint64_t hi = ~uint64_t(0);
  I hkey = zero;  // fmix32(hi32(gi) ^ key_hi) ^ key_lo, while hi32(gi) stays
  // Two vectors per iteration: the 16-bit states load, and their rounded halves pack, in pairs
  // (one permute per pair on AVX-512 to pack); rounding skips its NaN handling when no value
  // has one.
  // Each stream's lines kAhead elements on: the loop's arithmetic keeps few iterations in
  // flight, so the hardware prefetcher alone leaves the memory system idle and out-of-cache
  // sizes run well below their in-cache rate. The loads, prefetches and stores below are
  // spelled out per state on purpose: the same code through helper lambdas (one each for a
  // state's load, prefetch and f32 store) ran markedly slower (strata bench adam
  // --state-dtype bf16 --sizes 64M shows it).
  constexpr int64_t kAhead = 1024;
  const auto prefetch = [](const void* a, int64_t at, int64_t bytes_per) {
    const char* c = static_cast<const char*>(a) + at * bytes_per;
    for (int64_t off = 0; off < 2 * W * bytes_per; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
  };
  int64_t i = begin;
  for (; i + 2 * W <= end; i += 2 * W) {
    const uint64_t gi = uint64_t(t.index_base + i);
    if (uint32_t(gi) > 0xffffffffu - uint32_t(2 * W - 1)) {  // the lanes cross a 2^32 boundary
      nonfinite |= kernel16_scalar(t, i, i + 2 * W, c);
      continue;
    }
    const int64_t ahead = std::min(i + kAhead, end - 2 * W);  // stays inside [i, end)
    prefetch(t.grad, ahead, t.grad_dtype == DType::f32 ? 4 : 2);
    prefetch(t.param16 ? static_cast<const void*>(src.p16) : src.p, ahead, t.param16 ? 2 : 4);
    prefetch(t.m16 ? static_cast<const void*>(src.m16) : src.m, ahead, t.m16 ? 2 : 4);
    prefetch(t.v16 ? static_cast<const void*>(src.v16) : src.v, ahead, t.v16 ? 2 : 4);
    if (gi >> 32 != hi) hi = gi >> 32, hkey = V::set1i(fmix32(uint32_t(hi) ^ c.key_hi) ^ c.key_lo);
    F p[2], m[2], v[2];
    I h[2];
    if (t.param16)
      V::load16x2(src.p16 + i, p[0], p[1]);
    else
      p[0] = V::loadf(src.p + i), p[1] = V::loadf(src.p + i + W);
    if (t.m16)
      V::load16x2(src.m16 + i, m[0], m[1]);
    else
      m[0] = V::loadf(src.m + i), m[1] = V::loadf(src.m + i + W);
    if (t.v16)
      V::load16x2(src.v16 + i, v[0], v[1]);
    else
      v[0] = V::loadf(src.v + i), v[1] = V::loadf(src.v + i + W);
    const I base = V::set1i(uint32_t(gi));
    for (int k = 0; k < 2; ++k) {
      const F raw = V::load_grad(t.grad, t.grad_dtype, i + k * W);
      bad = V::flag(bad, raw);
      F g = V::mul(raw, gs);
      g = V::fmadd(l2, p[k], g);
      m[k] = V::fmadd(b1, m[k], V::mul(omb1, g));
      v[k] = V::fmadd(b2, v[k], V::mul(V::mul(omb2, g), g));
      const F d = V::fmadd(V::sqrt(v[k]), ibc2, eps);
      p[k] = V::fmadd(step, V::div(m[k], d), V::mul(p[k], decay));
      // h = fmix32(lo32(gi) ^ fmix32(hi32(gi) ^ key_hi) ^ key_lo); round to nearest reads no
      // random bits, and the hash's multiplies are a good part of the loop's arithmetic.
      h[k] = sr ? V::fmix(V::bxor(V::add(base, lanes[k]), hkey)) : zero;
    }
    const bool nan = V::any(V::either(V::either(V::unord(m[0], v[0]), V::unord(p[0], m[1])), V::unord(v[1], p[1])));
    // x's bf16 bits in the high half of each lane (round_state's; the low half is not used)
    const auto rnd = [nan](F x, I r, bool stochastic) {
      return nan ? V::round_hi(x, r, stochastic) : V::round_hi_finite(x, r, stochastic);
    };
    if (t.m16)
      V::store16x2(t.m16 + i, rnd(m[0], V::band(h[0], lo16), sr), rnd(m[1], V::band(h[1], lo16), sr));
    else
      V::storef(t.m + i, m[0]), V::storef(t.m + i + W, m[1]);
    if (t.v16)
      V::store16x2(t.v16 + i, rnd(v[0], V::srli16(h[0]), sr), rnd(v[1], V::srli16(h[1]), sr));
    else
      V::storef(t.v + i, v[0]), V::storef(t.v + i + W, v[1]);
    if (t.param16) {
      const I pb[2] = {rnd(p[0], sr ? V::srli16(V::mullo(h[0], key_p)) : zero, sr),
                       rnd(p[1], sr ? V::srli16(V::mullo(h[1], key_p)) : zero, sr)};
      V::store16x2(t.param16 + i, pb[0], pb[1]);
      p[0] = V::hi_to_f32(pb[0]), p[1] = V::hi_to_f32(pb[1]);  // the copy-out is the stored master
    } else {
      V::storef(t.param + i, p[0]), V::storef(t.param + i + W, p[1]);
    }
    if (out) {
      if (t.out_dtype == DType::bf16)
        V::store16x2(out + i, rnd(p[0], zero, false), rnd(p[1], zero, false));
      else
        V::store_f16(out + i, p[0]), V::store_f16(out + i + W, p[1]);
    }
  }
  nonfinite |= V::any(bad);
  if (i < end) nonfinite |= kernel16_scalar(t, i, end, c);
  return nonfinite;
}

// The 16-bit update's memory traffic with trivial arithmetic (strata bench adam's bound): f32
// arrays get x += g·k, bf16 ones +1 ulp; the same loads and stores as kernel16.
template <class V>
void stream_bound16(void* p, bool p16, void* m, void* v, bool s16, const void* g, DType gdt, int64_t begin,
                    int64_t end) {
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
    const F x = V::load_grad(g, gdt, i);
    touch(p, p16, i, x, a);
    touch(m, s16, i, x, b);
    touch(v, s16, i, x, c);
  }
}

}  // namespace strata::host::adam_impl
