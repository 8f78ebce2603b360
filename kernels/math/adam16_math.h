// The 16-bit optimizer states' rounding, shared by the CPU Adam (src/host/adam/adam16_*) and
// the CUDA AdamW on bf16 moments, so a state rounds the same way on every ISA and device.
//
// Stochastic rounding's random bits: for a step's keys (a function of the run's seed and the
// step only) and an element's model-flat index gi,
//   h = fmix32(lo32(gi) ^ fmix32(hi32(gi) ^ key_hi) ^ key_lo)
// m takes h's low 16 bits, v its high 16, and a bf16 master the high 16 of h·(key_p | 1) (an
// odd multiplier: a bijection; one multiply, where a second fmix32 would cost two). A state
// x rounds to bf16 as (bits(x) + r) >> 16 — up with probability equal to the dropped
// fraction, so the rounding is unbiased — or to nearest even; NaN becomes a quiet NaN and
// ±Inf stays itself (its mantissa is 0 and r < 2^16).
#pragma once
#include <cstdint>
#include <cstring>

#include "core/hd.h"
#include "kernels/math/dropout_math.h"
#include "kernels/math/element_math.h"

namespace strata::kernel_math {

struct Adam16Keys {
  uint32_t lo, hi, p;
};

// splitmix64 twice from (seed, step): never a function of the thread, tile or rank.
STRATA_HD Adam16Keys adam16_keys(uint64_t seed, int64_t step) {
  uint64_t x = seed ^ (uint64_t(step) * 0xd1b54a32d192ed03ull);
  const uint64_t k1 = mix64(x += 0x9e3779b97f4a7c15ull), k2 = mix64(x += 0x9e3779b97f4a7c15ull);
  return {uint32_t(k1), uint32_t(k1 >> 32), uint32_t(k2)};
}

STRATA_HD uint32_t fmix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0xc2b2ae35u;
  x ^= x >> 16;
  return x;
}

STRATA_HD uint32_t adam16_hash(uint64_t gi, const Adam16Keys& k) {
  return fmix32(uint32_t(gi) ^ fmix32(uint32_t(gi >> 32) ^ k.hi) ^ k.lo);
}

STRATA_HD uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

// Round to nearest even, NaN kept quiet (core/dtype.h's f32_to_bf16, usable on the device).
STRATA_HD uint16_t bf16_nearest(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

STRATA_HD float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

STRATA_HD uint16_t round_state(float x, uint32_t r16, bool stochastic) {
  const uint32_t u = f32_bits(x);
  if (!stochastic || (u & 0x7fffffffu) > 0x7f800000u) return bf16_nearest(x);
  return uint16_t((u + r16) >> 16);
}

// One element of the AdamW update with any of master, m and v in bf16: each state is given
// either as f32 (p, m, v) or as bf16 (p16, m16, v16), the other pointer null. The states are
// widened, updated by adamw_element and each bf16 one rounded back once with its own random
// bits from h (adam16_hash of the element's model-flat index): the CPU Adam's 16-bit kernel
// (src/host/adam/adam16_scalar.cpp) bit for bit. *stored is the parameter as stored (a bf16
// master's value, widened), which a copy-out rounds; returns false for a non-finite gradient.
STRATA_HD bool adamw16_element(float* p, uint16_t* p16, float* m, uint16_t* m16, float* v, uint16_t* v16,
                               float raw_grad, const AdamConsts& c, uint32_t h, uint32_t key_p, bool stochastic,
                               float* stored) {
  float pw = p16 ? bf16_value(*p16) : *p, mw = m16 ? bf16_value(*m16) : *m, vw = v16 ? bf16_value(*v16) : *v;
  const bool finite = adamw_element(&pw, &mw, &vw, raw_grad, c);
  if (m16)
    *m16 = round_state(mw, h & 0xffffu, stochastic);
  else
    *m = mw;
  if (v16)
    *v16 = round_state(vw, h >> 16, stochastic);
  else
    *v = vw;
  if (p16) {
    *p16 = round_state(pw, (h * (key_p | 1u)) >> 16, stochastic);
    pw = bf16_value(*p16);
  } else {
    *p = pw;
  }
  *stored = pw;
  return finite;
}

}  // namespace strata::kernel_math
