#include "io/tf_events.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata::io {

namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // the reflected Castagnoli polynomial
    t[i] = c;
  }
  return t;
}

// Protocol buffers' wire format, the pieces the three messages need.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out.push_back(char((v & 0x7F) | 0x80)), v >>= 7;
  out.push_back(char(v));
}
void key(std::string& out, int field, int wire_type) { varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }
template <typename T>
void fixed(std::string& out, T v) {  // little-endian, as x86 and the wire format
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void bytes_field(std::string& out, int field, std::string_view s) {
  key(out, field, 2);
  varint(out, s.size());
  out.append(s);
}

double wall_time() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// tensorboard.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary: value = 1, repeated Summary.Value: tag = 1, simple_value = 2 (float)).
std::string event(int64_t step, std::string_view file_version, std::string_view summary) {
  std::string e;
  key(e, 1, 1), fixed(e, wall_time());
  key(e, 2, 0), varint(e, uint64_t(step));
  if (!file_version.empty()) bytes_field(e, 3, file_version);
  if (!summary.empty()) bytes_field(e, 5, summary);
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

TfEventWriter::TfEventWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  STRATA_CHECK(!ec, "cannot create the TensorBoard directory '" + dir + "': " + ec.message(), "check --tensorboard");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = dir + "/events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(getpid());
  f_ = std::fopen(path_.c_str(), "wb");
  STRATA_CHECK(f_, "cannot open '" + path_ + "' for writing: " + std::strerror(errno), "check --tensorboard");
  record(event(0, "brain.Event:2", ""));
  flush();
}

TfEventWriter::~TfEventWriter() {
  if (f_) std::fclose(f_);
}

void TfEventWriter::scalar(std::string_view tag, double value, int64_t step) {
  std::string v;
  bytes_field(v, 1, tag);
  key(v, 2, 5), fixed(v, float(value));
  std::string summary;
  bytes_field(summary, 1, v);
  record(event(step, "", summary));
}

void TfEventWriter::record(const std::string& e) {
  std::string r;
  fixed(r, uint64_t(e.size()));
  fixed(r, masked_crc32c(r.data(), 8));
  r += e;
  fixed(r, masked_crc32c(e.data(), e.size()));
  STRATA_CHECK(std::fwrite(r.data(), 1, r.size(), f_) == r.size(),
               "writing '" + path_ + "' failed: " + std::strerror(errno), "is the disk full?");
}

void TfEventWriter::flush() {
  STRATA_CHECK(std::fflush(f_) == 0, "writing '" + path_ + "' failed: " + std::strerror(errno), "is the disk full?");
}

}  // namespace strata::io
