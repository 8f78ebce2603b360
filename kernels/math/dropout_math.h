// Dropout whose mask is a function of what an element is, not of where or when it is
// computed: keep(element) = hash(seed, site, index) ≥ p·2^32, with index built from the
// element's global sample number, position, and column (or head, query and key). The same
// sample therefore gets the same masks on any rank, world size, gradient-accumulation split,
// thread count or device, after a resume, and again in the backward pass, which regenerates
// the mask instead of storing it. Shared by the CPU ops, the CUDA kernels and their tests.
#pragma once
#include <cstdint>

#include "backend/op_specs.h"
#include "core/hd.h"

namespace strata {

namespace kernel_math {

// splitmix64's finaliser: a bijection of 64 bits with full avalanche.
STRATA_HD uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// The factor for element `index` of the spec's site: scale if kept, 0 if dropped.
STRATA_HD float dropout_mult(const DropoutSpec& d, uint64_t index) {
  const uint64_t h = mix64(d.key + index * 0x9e3779b97f4a7c15ull);
  return uint32_t(h >> 32) >= d.threshold ? d.scale : 0.0f;
}

// An activation [B, T, W]: element (row b, position t, column c).
STRATA_HD uint64_t dropout_index(const DropoutSpec& d, int64_t b, int64_t t, int64_t c, int64_t T, int64_t W) {
  return (uint64_t(d.first_row + b) * uint64_t(T) + uint64_t(t)) * uint64_t(W) + uint64_t(c);
}
// An attention probability: (row b, head h, query i, key j).
STRATA_HD uint64_t attn_dropout_index(const DropoutSpec& d, int64_t b, int64_t h, int64_t i, int64_t j, int64_t NH,
                                      int64_t T) {
  return ((uint64_t(d.first_row + b) * uint64_t(NH) + uint64_t(h)) * uint64_t(T) + uint64_t(i)) * uint64_t(T) +
         uint64_t(j);
}

}  // namespace kernel_math

// The spec for drop probability p at `site` (any number naming where in the model) of a
// run seeded `seed`, for a batch whose row 0 is global sample first_row.
inline DropoutSpec make_dropout(float p, uint64_t seed, uint64_t site, int64_t first_row) {
  DropoutSpec d;
  if (!(p > 0.0f)) return d;
  d.p = p;
  d.scale = 1.0f / (1.0f - p);
  const double t = double(p) * 4294967296.0;
  d.threshold = t >= 4294967295.0 ? 0xffffffffu : uint32_t(t);
  d.key = kernel_math::mix64(kernel_math::mix64(seed ^ 0x64726f706f7574ull) + site);  // "dropout"
  d.first_row = first_row;
  return d;
}

}  // namespace strata
