// dtype conversions: round-to-nearest-even at the edges, NaN/Inf preserved, and the
// vectorised cpu/ converters bit-identical to the scalar reference.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "host/convert.h"

namespace strata {
namespace {

float f(uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(f(0x3f808000)), 0x3f80);
  // 1.0078125 + half ulp: tie, the lower neighbour is odd, so round up.
  EXPECT_EQ(f32_to_bf16(f(0x3f818000)), 0x3f82);
  // Just above halfway rounds up; just below rounds down.
  EXPECT_EQ(f32_to_bf16(f(0x3f808001)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(f(0x3f807fff)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // Largest finite f32 rounds to +Inf in bf16 (RNE overflow), as IEEE requires.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(f(0x7f7f0000)), 0x7f7f);  // exactly representable max bf16
  // Subnormals keep their bits when representable.
  EXPECT_EQ(f32_to_bf16(f(0x00010000)), 0x0001);
}

TEST(Bf16, InfAndNanPreserved) {
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  // A NaN whose payload sits only in the low 16 bits must not become Inf.
  const uint16_t n = f32_to_bf16(f(0x7f800001));
  EXPECT_TRUE(std::isnan(bf16_to_f32(n)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f(0xffc00000)))));
  EXPECT_EQ(f32_to_bf16(f(0xffc00000)) & 0x8000, 0x8000);  // sign kept
  EXPECT_TRUE(std::isinf(bf16_to_f32(0x7f80)));
}

TEST(F16, RoundsToNearestEvenAndHandlesRanges) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // max finite
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);  // below the halfway point to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // halfway, ties to even = Inf
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  // 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1.0).
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-10f + 0x1p-11f), 0x3c02);  // tie with odd lower: up
  // Subnormals: 2^-24 is the smallest; 2^-25 is a tie between 0 and it, rounding to 0.
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);
  EXPECT_EQ(f32_to_f16(0x1p-25f * 1.0001f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x1p-24f * 1.5f), 0x0002);      // tie between 1 and 2 -> even (2)
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up into the normal range
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f(0x7f800001)))));
}

TEST(F16, EveryHalfRoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = f16_to_f32(uint16_t(h));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(v))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(v), h) << "half 0x" << std::hex << h;
  }
}

TEST(Bf16, EveryBf16RoundTripsExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = bf16_to_f32(uint16_t(h));
    if (std::isnan(v)) continue;
    ASSERT_EQ(f32_to_bf16(v), h);
  }
}

// The vector converters must agree bit for bit with the scalar ones, including NaNs,
// infinities, subnormals, ties, and lengths that are not multiples of the vector width.
TEST(VectorConvert, MatchesScalarBitForBit) {
  Rng rng(5);
  std::vector<float> src(1003);
  for (auto& x : src) x = f(uint32_t(rng.next_u64()));
  const float specials[] = {0.0f,     -0.0f,    INFINITY, -INFINITY,       NAN,           f(0x7f800001),
                            65520.0f, 65519.0f, 0x1p-25f, 0x1p-24f * 1.5f, f(0x3f808000), f(0x3f818000)};
  for (size_t i = 0; i < std::size(specials); ++i) src[i] = specials[i];
  for (DType t : {DType::bf16, DType::f16}) {
    std::vector<uint16_t> vec(src.size()), ref(src.size());
    host::convert_from_f32(vec.data(), t, src.data(), src.size());
    convert(ref.data(), t, src.data(), DType::f32, src.size());
    for (size_t i = 0; i < src.size(); ++i)
      ASSERT_EQ(vec[i], ref[i]) << dtype_name(t) << " at " << i << " of " << src[i];
    std::vector<float> back(src.size()), back_ref(src.size());
    host::convert_to_f32(back.data(), vec.data(), t, vec.size());
    convert(back_ref.data(), DType::f32, vec.data(), t, vec.size());
    for (size_t i = 0; i < src.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(back_ref[i])) << i;
  }
}

TEST(DType, ParseAndNames) {
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("f16"), DType::f16);
  EXPECT_EQ(dtype_name(DType::f32), "f32");
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_THROW(parse_dtype("f8"), Error);
}

}  // namespace
}  // namespace strata
