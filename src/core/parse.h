// Strict parsing of user-supplied values: the whole string must parse, or Error names it.
#pragma once
#include <cstdint>
#include <string>

namespace strata {

// "8GiB", "512MiB", "64KiB", "2G" (decimal), "1.5e9", "1000" -> bytes
size_t parse_bytes(const std::string& s, const std::string& option);
double parse_double(const std::string& s, const std::string& option);
// A whole number within [lo, hi]; overflow and values outside are "out of range" errors.
int64_t parse_int(const std::string& s, const std::string& option, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX);
// parse_int within an int's range (for options stored as int).
int parse_int32(const std::string& s, const std::string& option);
// A non-negative whole count that may be written in scientific notation: "500000000", "5e8".
int64_t parse_count(const std::string& s, const std::string& option);

}  // namespace strata
