#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata::io {

namespace {

constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // the reference implementation's limit

// Element sizes of every dtype the format defines; only F32/BF16/F16 are readable here.
int dtype_bytes(const std::string& name) {
  static const std::pair<const char*, int> table[] = {
      {"F64", 8},  {"I64", 8},     {"U64", 8},     {"F32", 4},     {"I32", 4}, {"U32", 4},
      {"F16", 2},  {"BF16", 2},    {"I16", 2},     {"U16", 2},     {"I8", 1},  {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1}, {"F4", 1}};
  for (const auto& [n, b] : table)
    if (name == n) return b;
  return 0;
}

bool readable_dtype(const std::string& name, DType* out) {
  if (name == "F32") return *out = DType::f32, true;
  if (name == "BF16") return *out = DType::bf16, true;
  if (name == "F16") return *out = DType::f16, true;
  return false;
}

std::string errno_text(int e) { return std::strerror(e); }

void pread_all(int fd, void* dst, size_t n, uint64_t offset, const std::string& path) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    STRATA_CHECK(r >= 0, "reading '" + path + "' at byte " + std::to_string(offset) + " failed: " + errno_text(errno),
                 "check the file and the disk");
    STRATA_CHECK(r > 0, "'" + path + "' ends at byte " + std::to_string(offset) + ", before the data its header lists",
                 "the file is truncated: copy it again");
    p += r, n -= size_t(r), offset += uint64_t(r);
  }
}

}  // namespace

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const SafeTensor* SafetensorsHeader::find(std::string_view name) const {
  for (const SafeTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
  }
  return "?";
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t data_bytes, const std::string& origin) {
  const std::string where = "safetensors file '" + origin + "'";
  const nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  STRATA_CHECK(!j.is_discarded(), where + ": the header is not valid JSON",
               "the file is corrupted or not a safetensors file");
  STRATA_CHECK(j.is_object(), where + ": the header is not a JSON object", "the file is corrupted");
  SafetensorsHeader h;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "__metadata__") {
      STRATA_CHECK(v.is_object(), where + ": __metadata__ is not an object", "the file is corrupted");
      for (auto m = v.begin(); m != v.end(); ++m) {
        STRATA_CHECK(m.value().is_string(), where + ": __metadata__." + m.key() + " is not a string",
                     "the format allows only string metadata");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string t = where + ", tensor '" + key + "'";
    STRATA_CHECK(v.is_object(), t + ": entry is not an object", "the file is corrupted");
    STRATA_CHECK(v.contains("dtype") && v["dtype"].is_string(), t + ": no dtype", "the file is corrupted");
    STRATA_CHECK(v.contains("shape") && v["shape"].is_array(), t + ": no shape", "the file is corrupted");
    STRATA_CHECK(v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2 &&
                     v["data_offsets"][0].is_number_unsigned() && v["data_offsets"][1].is_number_unsigned(),
                 t + ": data_offsets is not a pair of byte offsets", "the file is corrupted");
    SafeTensor st;
    st.name = key;
    const std::string dname = v["dtype"].get<std::string>();
    const int esz = dtype_bytes(dname);
    STRATA_CHECK(esz > 0, t + ": unknown dtype '" + dname + "'", "the file is corrupted or from a newer format");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      STRATA_CHECK(d.is_number_unsigned(), t + ": shape holds a non-integer or negative size", "the file is corrupted");
      const uint64_t dim = d.get<uint64_t>();
      STRATA_CHECK(!__builtin_mul_overflow(numel, dim, &numel) && numel < (uint64_t(1) << 48),
                   t + ": shape has too many elements", "the file is corrupted");
      st.shape.push_back(int64_t(dim));
    }
    st.begin = v["data_offsets"][0].get<uint64_t>(), st.end = v["data_offsets"][1].get<uint64_t>();
    STRATA_CHECK(st.begin <= st.end && st.end <= data_bytes,
                 t + ": data at bytes [" + std::to_string(st.begin) + ", " + std::to_string(st.end) +
                     ") but the data section has " + std::to_string(data_bytes) + " bytes",
                 "the file is truncated or corrupted: copy it again");
    STRATA_CHECK(st.end - st.begin == numel * uint64_t(esz),
                 t + ": " + std::to_string(st.end - st.begin) + " bytes for " + std::to_string(numel) + " " + dname +
                     " elements",
                 "the header's shape and offsets disagree: the file is corrupted");
    st.dtype_name = dname;
    st.readable = readable_dtype(dname, &st.dtype);
    h.tensors.push_back(std::move(st));
  }
  // The data section is the tensors back to back, in offset order, with nothing left over.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafeTensor& a, const SafeTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const SafeTensor& st : h.tensors) {
    STRATA_CHECK(st.begin == at,
                 where + ": tensor '" + st.name + "' starts at byte " + std::to_string(st.begin) + ", expected " +
                     std::to_string(at) + " (tensors overlap or leave a gap)",
                 "the file is corrupted");
    at = st.end;
  }
  STRATA_CHECK(
      at == data_bytes,
      where + ": the tensors cover " + std::to_string(at) + " of the " + std::to_string(data_bytes) + " data bytes",
      "the file has trailing bytes or is corrupted");
  return h;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  STRATA_CHECK(fd_ >= 0, "cannot open '" + path_ + "': " + errno_text(errno), "check the path");
  struct stat st {};
  STRATA_CHECK(::fstat(fd_, &st) == 0, "cannot stat '" + path_ + "': " + errno_text(errno), "check the path");
  const uint64_t size = uint64_t(st.st_size);
  STRATA_CHECK(size >= 8, "'" + path_ + "' has " + std::to_string(size) + " bytes: too short for a safetensors header",
               "the file is truncated or not a safetensors file");
  unsigned char len8[8];
  pread_all(fd_, len8, 8, 0, path_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len8[i];
  STRATA_CHECK(n <= kMaxHeader && n <= size - 8,
               "'" + path_ + "': header length " + std::to_string(n) + " is past the file's " + std::to_string(size) +
                   " bytes or the 100 MiB limit",
               "the file is truncated or not a safetensors file");
  std::string text(size_t(n), '\0');
  pread_all(fd_, text.data(), size_t(n), 8, path_);
  data_start_ = 8 + n;
  header_ = parse_safetensors_header(text, size - data_start_, path_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(o.fd_), data_start_(o.data_start_), header_(std::move(o.header_)) {
  o.fd_ = -1;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafeTensor& SafetensorsFile::tensor(std::string_view name) const {
  const SafeTensor* t = header_.find(name);
  STRATA_CHECK(t, "'" + path_ + "' has no tensor '" + std::string(name) + "'",
               "the file was written for a different model or naming");
  return *t;
}

void SafetensorsFile::read_raw(uint64_t offset, void* dst, size_t n) const {
  pread_all(fd_, dst, n, data_start_ + offset, path_);
}

void SafetensorsFile::read_f32(const SafeTensor& t, int64_t first, std::span<float> out) const {
  STRATA_CHECK(t.readable, "'" + path_ + "', tensor '" + t.name + "': dtype " + t.dtype_name + " cannot be read as f32",
               "store the weights as F32, BF16 or F16");
  STRATA_CHECK(first >= 0 && first + int64_t(out.size()) <= t.numel(),
               "'" + path_ + "', tensor '" + t.name + "': elements [" + std::to_string(first) + ", +" +
                   std::to_string(out.size()) + ") are past its " + std::to_string(t.numel()),
               "this is a bug in the caller");
  const size_t esz = dtype_size(t.dtype);
  if (t.dtype == DType::f32) {
    read_raw(t.begin + uint64_t(first) * 4, out.data(), out.size() * 4);
    return;
  }
  // 16-bit: read into the back half of the destination, then widen front to back: out[i]
  // only overlaps 16-bit values at index <= i, which have been read by then.
  uint16_t* half = reinterpret_cast<uint16_t*>(out.data()) + out.size();
  read_raw(t.begin + uint64_t(first) * esz, half, out.size() * esz);
  const bool bf = t.dtype == DType::bf16;
  for (size_t i = 0; i < out.size(); ++i) out[i] = bf ? bf16_to_f32(half[i]) : f16_to_f32(half[i]);
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<Entry> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const Entry& e : tensors) {
    uint64_t n = 1;
    for (int64_t d : e.shape) n *= uint64_t(d);
    const uint64_t bytes = n * dtype_size(e.dtype);
    h[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  expected_ = at;
  std::string text = h.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // data 8-byte aligned, as the reference writer does
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  STRATA_CHECK(fd_ >= 0, "cannot create '" + path_ + "': " + errno_text(errno), "check the directory and permissions");
  hash_ = XXH64_createState();
  XXH64_reset(static_cast<XXH64_state_t*>(hash_), 0);
  unsigned char len8[8];
  for (int i = 0; i < 8; ++i) len8[i] = (uint64_t(text.size()) >> (8 * i)) & 0xff;
  put(len8, 8);
  put(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (hash_) XXH64_freeState(static_cast<XXH64_state_t*>(hash_));
}

void SafetensorsWriter::put(const void* data, size_t bytes) {
  XXH64_update(static_cast<XXH64_state_t*>(hash_), data, bytes);
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::write(fd_, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    STRATA_CHECK(w > 0, "writing '" + path_ + "' failed: " + errno_text(w < 0 ? errno : ENOSPC),
                 "free space on that file system (nothing before this write was replaced)");
    p += w, bytes -= size_t(w), total_ += uint64_t(w);
  }
}

void SafetensorsWriter::write(const void* data, size_t bytes) {
  STRATA_CHECK(written_ + bytes <= expected_, "'" + path_ + "': more tensor bytes written than the header lists",
               "this is a bug in the caller");
  put(data, bytes);
  written_ += bytes;
}

void SafetensorsWriter::write_f32(std::span<const float> values, DType as) {
  if (as == DType::f32) return write(values.data(), values.size() * 4);
  convert_.resize(values.size() * 2);
  uint16_t* h = reinterpret_cast<uint16_t*>(convert_.data());
  for (size_t i = 0; i < values.size(); ++i) h[i] = as == DType::bf16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
  write(h, values.size() * 2);
}

uint64_t SafetensorsWriter::finish() {
  STRATA_CHECK(
      written_ == expected_,
      "'" + path_ + "': " + std::to_string(written_) + " of " + std::to_string(expected_) + " tensor bytes written",
      "this is a bug in the caller");
  STRATA_CHECK(::fsync(fd_) == 0, "fsync of '" + path_ + "' failed: " + errno_text(errno),
               "the disk may be full or failing");
  STRATA_CHECK(::close(fd_) == 0, "closing '" + path_ + "' failed: " + errno_text(errno),
               "the disk may be full or failing");
  fd_ = -1;
  return XXH64_digest(static_cast<XXH64_state_t*>(hash_));
}

uint64_t file_xxh64(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  STRATA_CHECK(fd >= 0, "cannot open '" + path + "': " + errno_text(errno), "check the path");
  XXH64_state_t* s = XXH64_createState();
  XXH64_reset(s, 0);
  std::vector<char> buf(size_t(8) << 20);
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = errno;
      ::close(fd);
      XXH64_hash_t h = XXH64_digest(s);
      XXH64_freeState(s);
      STRATA_CHECK(r == 0, "reading '" + path + "' failed: " + errno_text(e), "check the disk");
      return h;
    }
    XXH64_update(s, buf.data(), size_t(r));
  }
}

std::string hex64(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
  return b;
}

}  // namespace strata::io
