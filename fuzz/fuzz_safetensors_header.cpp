// libFuzzer target: the safetensors header parser. Input: 8 bytes of data-section size
// (little endian), then the header JSON. A strata::Error is the parser refusing bad input;
// anything else escaping (another exception, a sanitizer report) is a bug.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  uint64_t data_bytes;
  std::memcpy(&data_bytes, data, 8);
  const std::string_view json(reinterpret_cast<const char*>(data) + 8, size - 8);
  try {
    const strata::io::SafetensorsHeader h = strata::io::parse_safetensors_header(json, data_bytes, "fuzz");
    // What the reader relies on once the header is accepted.
    for (const strata::io::SafeTensor& t : h.tensors) {
      if (t.end < t.begin || t.end > data_bytes) __builtin_trap();
      if (t.readable && uint64_t(t.numel()) * strata::dtype_size(t.dtype) != t.end - t.begin) __builtin_trap();
      if (h.find(t.name) != &t) __builtin_trap();
    }
  } catch (const strata::Error&) {
  }
  return 0;
}
