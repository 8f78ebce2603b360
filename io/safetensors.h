// Hugging Face safetensors: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the
// tensors' bytes. Used for model weights in and out and for checkpoint partitions.
//
// The reader never trusts the file: the header's size, JSON, dtypes, shapes and offsets are
// checked against each other and the file's size before anything is read, and every error
// names the file and the tensor. Reads go straight from the file (pread) into the caller's
// buffer, converted to f32, so a 13B import never holds more than one piece at a time.
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace strata::io {

struct SafeTensor {
  std::string name;
  DType dtype = DType::f32;  // when readable
  std::string dtype_name;    // as the file spells it ("F32", "BF16", "I64", ...)
  bool readable = true;      // F32, BF16 or F16: what Strata reads
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<SafeTensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  const SafeTensor* find(std::string_view name) const;
};

// Parses and validates a header's JSON against a data section of data_bytes (the fuzzed
// entry point). Throws Error naming `origin`.
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t data_bytes, const std::string& origin);

class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) = delete;
  SafetensorsFile(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  const SafeTensor& tensor(std::string_view name) const;  // throws when absent
  // Elements [first, first + out.size()) of a tensor (row-major), converted to f32.
  void read_f32(const SafeTensor& t, int64_t first, std::span<float> out) const;
  // Raw bytes [offset, offset + n) of the data section.
  void read_raw(uint64_t offset, void* dst, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  SafetensorsHeader header_;
};

// Writes a safetensors file in one streaming pass: the header is fixed up front from the
// tensor table, then the tensors' bytes follow in that order. Each byte goes through an
// xxHash64 so the caller gets the file's checksum without reading it back. finish() fsyncs.
class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  SafetensorsWriter(std::string path, std::vector<Entry> tensors, std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();
  // The next bytes of the data section (tensors in order; any split of them).
  void write(const void* data, size_t bytes);
  // f32 values written as the current tensor's dtype.
  void write_f32(std::span<const float> values, DType as);
  // Checks every byte was written, fsyncs and closes. Returns the file's xxHash64.
  uint64_t finish();
  uint64_t bytes_total() const { return total_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t expected_ = 0, written_ = 0, total_ = 0;
  void* hash_ = nullptr;  // XXH64_state_t
  std::vector<char> convert_;
  void put(const void* data, size_t bytes);
};

// xxHash64 of a whole file (checkpoint manifests), and the same as text.
uint64_t file_xxh64(const std::string& path);
std::string hex64(uint64_t v);

// safetensors' dtype names: "F32", "BF16", "F16" (others are refused with their name).
std::string_view safetensors_dtype_name(DType t);

}  // namespace strata::io
