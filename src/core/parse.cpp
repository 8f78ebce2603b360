#include "core/parse.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"

namespace strata {

double parse_double(const std::string& s, const std::string& option) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  STRATA_CHECK(!s.empty() && end && *end == 0 && end != s.c_str(), option + ": '" + s + "' is not a number",
               "give a value such as 3e-4");
  STRATA_CHECK(errno != ERANGE && std::isfinite(v), option + ": " + s + " is out of range (not a finite double)",
               "give a value such as 3e-4");
  return v;
}

int64_t parse_int(const std::string& s, const std::string& option, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  STRATA_CHECK(!s.empty() && end && *end == 0 && end != s.c_str(), option + ": '" + s + "' is not an integer",
               "give a whole number such as 8");
  STRATA_CHECK(errno != ERANGE, option + ": " + s + " is out of range (it does not fit in a 64-bit integer)",
               "give a smaller whole number");
  STRATA_CHECK(v >= lo && v <= hi,
               option + ": " + s + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
               "give a whole number within that range");
  return v;
}

int parse_int32(const std::string& s, const std::string& option) {
  return int(parse_int(s, option, std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
}

int64_t parse_count(const std::string& s, const std::string& option) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  STRATA_CHECK(!s.empty() && end && *end == 0 && end != s.c_str() && v >= 0 && v == std::floor(v),
               option + ": '" + s + "' is not a whole, non-negative count", "give a count such as 500000000 or 5e8");
  STRATA_CHECK(errno != ERANGE && std::isfinite(v) && v < 9.2e18,
               option + ": " + s + " is out of range (at most 9.2e18)", "give a count such as 500000000 or 5e8");
  return int64_t(v);
}

size_t parse_bytes(const std::string& s, const std::string& option) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  STRATA_CHECK(!s.empty() && end != s.c_str() && errno == 0 && v >= 0 && std::isfinite(v),
               option + ": '" + s + "' is not a size", "give a size such as 8GiB, 512MiB or 1e9");
  const std::string unit(end);
  double mult = 0;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "KiB" || unit == "K")
    mult = 1024.0;
  else if (unit == "MiB" || unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "T")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "KB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else if (unit == "TB")
    mult = 1e12;
  STRATA_CHECK(mult > 0, option + ": unknown unit '" + unit + "' in '" + s + "'",
               "use B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)");
  STRATA_CHECK(v * mult < 9.2e18, option + ": " + s + " is out of range (at most 8 EiB)", "give a size such as 8GiB");
  return size_t(std::llround(v * mult));
}

}  // namespace strata
