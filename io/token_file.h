// Token files as nanoGPT and llm.c write them, and plain text read as bytes:
//   *.bin / *.u16 : headerless little-endian uint16 (nanoGPT), or llm.c's format
//                   (a 256 × int32 header with magic 20240520, version 1, token count)
//   *.u32         : headerless little-endian uint32
//   *.txt         : UTF-8 text, tokenized byte-level (vocabulary 256)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::io {

enum class TokenFormat { automatic, u16, u32, text };
TokenFormat parse_token_format(const std::string& s);  // auto|u16|u32|text

struct TokenFile {
  std::string path;
  TokenFormat format;  // as resolved
  std::vector<int32_t> tokens;
  int32_t max_token = -1;
};

// Reads the whole file; errors name the file and what is wrong with it.
TokenFile read_token_file(const std::string& path, TokenFormat format = TokenFormat::automatic);

}  // namespace strata::io
