// Element types: f32, bf16 and f16, with round-to-nearest-even conversions that keep
// NaN a NaN (quiet, sign and top payload bits kept) and Inf an Inf.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

enum class DType : uint8_t { f32, bf16, f16 };

constexpr size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
std::string_view dtype_name(DType t);
// Parses "f32" | "bf16" | "f16"; throws strata::Error naming the bad value otherwise.
DType parse_dtype(std::string_view s);

// Storage-only 16-bit types: arithmetic happens in f32 after conversion.
struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                            // round to nearest, ties to even
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {  // zero or subnormal: mant * 2^-24 is exact in f32
    float v = float(mant) * 0x1p-24f;
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

// Integer-only so the result does not depend on the FPU's FTZ/DAZ or rounding mode.
inline uint16_t f32_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00u | uint16_t((ax >> 13) & 0x3ffu);  // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;                                 // >= 65520 rounds to Inf (ties to even)
  if (ax >= 0x38800000u) {                                                      // normal f16 range
    uint32_t odd = (ax >> 13) & 1u;
    ax += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
    return sign | uint16_t(ax >> 13);
  }
  // Subnormal f16 (or zero): value * 2^24 rounded to nearest even.
  uint32_t e = ax >> 23;
  if (e == 0) return sign;  // f32 zero/subnormal is far below f16's smallest subnormal
  uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - e;  // >= 14 here
  if (shift >= 32) return sign;
  uint32_t q = m >> shift, r = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (r > half || (r == half && (q & 1u))) ++q;
  return sign | uint16_t(q);
}

inline float to_f32(float v) { return v; }
inline float to_f32(bf16 v) { return bf16_to_f32(v.bits); }
inline float to_f32(f16 v) { return f16_to_f32(v.bits); }

template <typename T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) {
  return v;
}
template <>
inline bf16 from_f32<bf16>(float v) {
  return bf16{f32_to_bf16(v)};
}
template <>
inline f16 from_f32<f16>(float v) {
  return f16{f32_to_f16(v)};
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::f16;
}

// Bulk conversions between any two dtypes (scalar reference; cpu/ has vector versions).
void convert(void* dst, DType dst_t, const void* src, DType src_t, size_t n);

}  // namespace strata
