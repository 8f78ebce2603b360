// TensorBoard event files: CRC-32C against its published check value and a bitwise
// reference, and a file read back record by record (TFRecord framing: length, masked CRC of
// the length, data, masked CRC of the data) with its scalars decoded from the protobuf wire
// format. (cli.monitors reads the files with the tensorboard package where it is installed.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/tf_events.h"

namespace strata {
namespace {

uint32_t crc32c_bitwise(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}

uint64_t varint(const std::string& s, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    const auto b = uint8_t(s.at(at++));
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

struct Scalar {
  int64_t step = -1;
  std::string tag, file_version;
  float value = 0;
};

// The fields of one Event this writer sets (and the one Summary.Value inside).
Scalar decode(const std::string& e) {
  Scalar s;
  for (size_t at = 0; at < e.size();) {
    const uint64_t key = varint(e, at);
    const int field = int(key >> 3), wire = int(key & 7);
    if (wire == 1) {  // wall_time
      at += 8;
    } else if (wire == 0) {
      const uint64_t v = varint(e, at);
      if (field == 2) s.step = int64_t(v);
    } else if (wire == 2) {
      const size_t n = size_t(varint(e, at));
      const std::string body = e.substr(at, n);
      at += n;
      if (field == 3) s.file_version = body;
      if (field == 5) {  // Summary { value = 1: Value { tag = 1, simple_value = 2 } }
        size_t p = 0;
        EXPECT_EQ(varint(body, p), uint64_t(1 << 3 | 2));
        const std::string v = body.substr(p);
        size_t q = 0;
        const size_t vn = size_t(varint(v, q));
        const std::string value = v.substr(q, vn);
        size_t r = 0;
        EXPECT_EQ(varint(value, r), uint64_t(1 << 3 | 2));
        const size_t tn = size_t(varint(value, r));
        s.tag = value.substr(r, tn);
        r += tn;
        EXPECT_EQ(varint(value, r), uint64_t(2 << 3 | 5));
        std::memcpy(&s.value, value.data() + r, 4);
      }
    } else {
      ADD_FAILURE() << "wire type " << wire;
      break;
    }
  }
  return s;
}

TEST(TfEvents, Crc32cIsCastagnolis) {
  EXPECT_EQ(io::crc32c("123456789", 9), 0xE3069283u);  // the published check value
  for (const std::string& s : {std::string(""), std::string("a"), std::string(1000, 'x'), std::string("brain.Event:2")})
    EXPECT_EQ(io::crc32c(s.data(), s.size()), crc32c_bitwise(s)) << s;
}

TEST(TfEvents, RecordsAreFramedAndChecked) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("strata_tf_events_" + std::to_string(::getpid()))).string();
  std::string path;
  {
    io::TfEventWriter w(dir);
    w.scalar("Train/Samples/train_loss", 2.5, 8);
    w.scalar("Train/Samples/lr", 1e-3, 16);
    w.flush();
    path = w.path();
  }
  EXPECT_TRUE(std::filesystem::path(path).filename().string().starts_with("events.out.tfevents."));
  std::ifstream f(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<Scalar> events;
  for (size_t at = 0; at < file.size();) {
    ASSERT_LE(at + 12, file.size());
    uint64_t n;
    uint32_t len_crc, data_crc;
    std::memcpy(&n, file.data() + at, 8);
    std::memcpy(&len_crc, file.data() + at + 8, 4);
    EXPECT_EQ(len_crc, io::masked_crc32c(file.data() + at, 8));
    const std::string data = file.substr(at + 12, n);
    std::memcpy(&data_crc, file.data() + at + 12 + n, 4);
    const uint32_t c = crc32c_bitwise(data);
    EXPECT_EQ(data_crc, ((c >> 15) | (c << 17)) + 0xA282EAD8u);  // TFRecord's mask
    events.push_back(decode(data));
    at += 12 + n + 4;
  }
  std::filesystem::remove_all(dir);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].tag, "Train/Samples/train_loss");
  EXPECT_EQ(events[1].step, 8);
  EXPECT_EQ(events[1].value, 2.5f);
  EXPECT_EQ(events[2].tag, "Train/Samples/lr");
  EXPECT_EQ(events[2].step, 16);
  EXPECT_EQ(events[2].value, 1e-3f);
}

}  // namespace
}  // namespace strata
