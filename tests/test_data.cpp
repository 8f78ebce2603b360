// Token files in every supported format, their errors, and the deterministic loader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/token_file.h"
#include "test_util.h"
#include "train/data_loader.h"

namespace strata {
namespace {

std::string write_file(const std::string& name, const std::string& bytes) {
  return test::write_temp_file("data", name, bytes);
}

template <typename T>
std::string raw(std::initializer_list<T> v) {
  std::string s(v.size() * sizeof(T), '\0');
  size_t i = 0;
  for (T x : v) std::memcpy(&s[i++ * sizeof(T)], &x, sizeof(T));
  return s;
}

TEST(TokenFile, HeaderlessUint16) {
  auto tf = io::read_token_file(write_file("a.bin", raw<uint16_t>({1, 65535, 7})));
  EXPECT_EQ(tf.tokens, (std::vector<int32_t>{1, 65535, 7}));
  EXPECT_EQ(tf.max_token, 65535);
}

TEST(TokenFile, Uint32) {
  auto tf = io::read_token_file(write_file("a.u32", raw<uint32_t>({100000, 3})));
  EXPECT_EQ(tf.tokens, (std::vector<int32_t>{100000, 3}));
}

TEST(TokenFile, LlmcHeader) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = 3;
  std::string bytes(reinterpret_cast<char*>(header.data()), 1024);
  bytes += raw<uint16_t>({5, 6, 7});
  auto tf = io::read_token_file(write_file("llmc.bin", bytes));
  EXPECT_EQ(tf.tokens, (std::vector<int32_t>{5, 6, 7}));
  header[2] = 10;  // claims more tokens than the file has
  std::string truncated(reinterpret_cast<char*>(header.data()), 1024);
  truncated += raw<uint16_t>({5, 6, 7});
  EXPECT_THROW(io::read_token_file(write_file("llmc_bad.bin", truncated)), Error);
}

TEST(TokenFile, TextIsByteLevel) {
  auto tf = io::read_token_file(write_file("a.txt", "Hi\xff"));
  EXPECT_EQ(tf.tokens, (std::vector<int32_t>{'H', 'i', 255}));
}

TEST(TokenFile, ErrorsNameTheFile) {
  try {
    io::read_token_file(write_file("odd.bin", "abc"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("odd.bin"), std::string::npos);
  }
  EXPECT_THROW(io::read_token_file("/nonexistent/x.bin"), Error);
  EXPECT_THROW(io::parse_token_format("u8"), Error);
}

TEST(DataLoader, SamplesDependOnlyOnSeedAndIndex) {
  std::vector<int32_t> toks(1000);
  for (int i = 0; i < 1000; ++i) toks[size_t(i)] = i;
  DataLoader a(toks, 16, 7, "x"), b(toks, 16, 7, "x"), c(toks, 16, 8, "x");
  std::vector<int32_t> in1(64), tg1(64), in2(64), tg2(64), in3(64), tg3(64);
  a.fill(10, 4, in1, tg1);
  // The same four samples fetched as two micro-batches of two.
  b.fill(10, 2, std::span(in2).first(32), std::span(tg2).first(32));
  b.fill(12, 2, std::span(in2).last(32), std::span(tg2).last(32));
  EXPECT_EQ(in1, in2);
  EXPECT_EQ(tg1, tg2);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(tg1[size_t(i)], in1[size_t(i)] + 1);  // targets are next tokens
  c.fill(10, 4, in3, tg3);
  EXPECT_NE(in1, in3);  // the seed matters
  EXPECT_THROW(DataLoader(std::vector<int32_t>(10), 16, 1, "short"), Error);
}

}  // namespace
}  // namespace strata
