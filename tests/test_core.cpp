// Tensor views, the error type and strict value parsing.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/parse.h"
#include "core/tensor.h"

namespace strata {
namespace {

TEST(TensorView, CarriesDtypeShapeAndTier) {
  float data[24] = {};
  TensorView v{data, DType::f32, {2, 3, 4}, Tier::host};
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.bytes(), 96u);
  EXPECT_EQ(v.shape.str(), "[2, 3, 4]");
  EXPECT_EQ(tier_name(v.tier), "host");
  TensorView s = v.slice0(1);
  EXPECT_EQ(s.shape, (Shape{3, 4}));
  EXPECT_EQ(s.as<float>(), data + 12);
  EXPECT_EQ(s.tier, Tier::host);
  EXPECT_THROW(v.slice0(2), Error);
  EXPECT_THROW(v.as<bf16>(), Error);  // dtype mismatch is caught, not reinterpreted
}

TEST(Error, SaysWhatWhereAndWhatToDo) {
  try {
    STRATA_CHECK(1 + 1 == 3, "arithmetic broke", "file a bug");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("arithmetic broke"), std::string::npos);
    EXPECT_NE(msg.find("file a bug"), std::string::npos);
    EXPECT_NE(msg.find("test_core.cpp:"), std::string::npos) << msg;
    EXPECT_EQ(e.hint(), "file a bug");
  }
}

TEST(Parse, BytesIntsAndDoublesAreStrict) {
  EXPECT_EQ(parse_bytes("8GiB", "--x"), size_t(8) << 30);
  EXPECT_EQ(parse_bytes("512MiB", "--x"), size_t(512) << 20);
  EXPECT_EQ(parse_bytes("1e9", "--x"), size_t(1000000000));
  EXPECT_EQ(parse_bytes("2GB", "--x"), size_t(2000000000));
  EXPECT_THROW(parse_bytes("8 apples", "--x"), Error);
  EXPECT_THROW(parse_bytes("-1", "--x"), Error);
  EXPECT_EQ(parse_int("42", "--x"), 42);
  EXPECT_THROW(parse_int("4x", "--steps"), Error);
  EXPECT_THROW(parse_int("", "--steps"), Error);
  EXPECT_DOUBLE_EQ(parse_double("3e-4", "--lr"), 3e-4);
  EXPECT_THROW(parse_double("fast", "--lr"), Error);
  EXPECT_THROW(parse_double("nan", "--lr"), Error);
  try {
    parse_int("4x", "--steps");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--steps"), std::string::npos);
  }
  // Overflow and ranges are "out of range", naming the option, never "not an integer".
  auto message = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([] {
              parse_int("99999999999999999999", "--steps");
            }).find("--steps: 99999999999999999999 is out of range"),
            std::string::npos);
  EXPECT_NE(
      message([] { parse_int32("3000000000", "--micro-batch"); }).find("--micro-batch: 3000000000 is out of range"),
      std::string::npos);
  EXPECT_NE(message([] { parse_int("-1", "--seed", 0); }).find("out of range [0, "), std::string::npos);
  EXPECT_NE(message([] { parse_double("1e999", "--lr"); }).find("--lr: 1e999 is out of range"), std::string::npos);
  EXPECT_NE(message([] { parse_count("1e30", "--reduce-bucket-size"); }).find("out of range"), std::string::npos);
  EXPECT_NE(message([] { parse_bytes("1e30GiB", "--device-mem"); }).find("out of range"), std::string::npos);
  EXPECT_EQ(parse_int32("-7", "--x"), -7);
}

TEST(FormatBytes, HumanReadable) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(double(size_t(8) << 30)), "8.00 GiB");
}

}  // namespace
}  // namespace strata
