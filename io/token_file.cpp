#include "io/token_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace strata::io {

TokenFormat parse_token_format(const std::string& s) {
  if (s == "auto") return TokenFormat::automatic;
  if (s == "u16") return TokenFormat::u16;
  if (s == "u32") return TokenFormat::u32;
  if (s == "text") return TokenFormat::text;
  throw_error("unknown data format '" + s + "'", "use one of auto, u16, u32, text, jsonl");
}

static bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

static std::vector<char> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  STRATA_CHECK(f.good(), "cannot open data file '" + path + "': " + std::strerror(errno),
               "check --data (a token file .bin/.u16/.u32 or a text file .txt)");
  const auto size = f.tellg();
  std::vector<char> bytes(size_t(std::max<std::streamoff>(size, 0)));
  f.seekg(0);
  f.read(bytes.data(), std::streamsize(bytes.size()));
  STRATA_CHECK(f.good() || bytes.empty(), "short read of data file '" + path + "'", "is the file being written?");
  return bytes;
}

TokenFile read_token_file(const std::string& path, TokenFormat format) {
  TokenFile out{path, format, {}, -1};
  if (format == TokenFormat::automatic)
    out.format = ends_with(path, ".txt")   ? TokenFormat::text
                 : ends_with(path, ".u32") ? TokenFormat::u32
                                           : TokenFormat::u16;
  std::vector<char> bytes = slurp(path);
  size_t offset = 0, count = 0;
  switch (out.format) {
    case TokenFormat::text:
      out.tokens.resize(bytes.size());
      for (size_t i = 0; i < bytes.size(); ++i) out.tokens[i] = int32_t(uint8_t(bytes[i]));
      break;
    case TokenFormat::u16: {
      int32_t header[3];
      if (bytes.size() >= 1024) std::memcpy(header, bytes.data(), sizeof header);
      if (bytes.size() >= 1024 && header[0] == 20240520) {  // llm.c's header
        STRATA_CHECK(header[1] == 1, "data file '" + path + "' has llm.c header version " + std::to_string(header[1]),
                     "only version 1 (uint16 tokens) is supported");
        offset = 1024;
        count = size_t(uint32_t(header[2]));
        STRATA_CHECK(offset + count * 2 <= bytes.size(),
                     "data file '" + path + "' is truncated: header says " + std::to_string(count) +
                         " tokens, file has " + std::to_string((bytes.size() - offset) / 2),
                     "regenerate the token file");
      } else {
        STRATA_CHECK(
            bytes.size() % 2 == 0,
            "data file '" + path + "' has an odd size (" + std::to_string(bytes.size()) + " bytes) for uint16 tokens",
            "if it holds uint32 tokens name it .u32 or pass --data-format u32");
        count = bytes.size() / 2;
      }
      out.tokens.resize(count);
      for (size_t i = 0; i < count; ++i) {
        uint16_t v;
        std::memcpy(&v, bytes.data() + offset + 2 * i, 2);
        out.tokens[i] = v;
      }
      break;
    }
    case TokenFormat::u32:
      STRATA_CHECK(
          bytes.size() % 4 == 0,
          "data file '" + path + "' size " + std::to_string(bytes.size()) + " is not a multiple of 4 for uint32 tokens",
          "check --data-format");
      out.tokens.resize(bytes.size() / 4);
      for (size_t i = 0; i < out.tokens.size(); ++i) {
        uint32_t v;
        std::memcpy(&v, bytes.data() + 4 * i, 4);
        STRATA_CHECK(v <= uint32_t(INT32_MAX),
                     "data file '" + path + "': token " + std::to_string(i) + " is " + std::to_string(v),
                     "token ids must be below 2^31");
        out.tokens[i] = int32_t(v);
      }
      break;
    case TokenFormat::automatic:
      break;
  }
  for (int32_t t : out.tokens) out.max_token = std::max(out.max_token, t);
  return out;
}

}  // namespace strata::io
