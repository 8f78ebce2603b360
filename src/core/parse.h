// Strict parsing of user-supplied values: the whole string must parse, or Error names it.
#pragma once
#include <cstdint>
#include <string>

namespace strata {

// "8GiB", "512MiB", "64KiB", "2G" (decimal), "1.5e9", "1000" -> bytes
size_t parse_bytes(const std::string& s, const std::string& option);
double parse_double(const std::string& s, const std::string& option);
int64_t parse_int(const std::string& s, const std::string& option);
// A non-negative whole count that may be written in scientific notation: "500000000", "5e8".
int64_t parse_count(const std::string& s, const std::string& option);

}  // namespace strata
