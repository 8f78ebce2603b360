#include "core/error.h"

#include <cstdio>

namespace strata {

static std::string compose(const std::string& what, const std::string& hint, const std::string& where) {
  std::string s = what;
  if (!hint.empty()) s += " — " + hint;
  s += " [" + where + "]";
  return s;
}

static std::string where_string(const std::source_location& loc) {
  std::string file = loc.file_name();
  // Keep the path relative to the source tree so messages are short and stable.
  for (const char* top : {"/src/", "/cpu/", "/kernels/", "/io/", "/bench/", "/tests/"}) {
    auto pos = file.rfind(top);
    if (pos != std::string::npos) {
      file = file.substr(pos + 1);
      break;
    }
  }
  return file + ":" + std::to_string(loc.line());
}

Error::Error(std::string what, std::string hint, std::source_location where)
    : std::runtime_error(compose(what, hint, where_string(where))),
      what_(std::move(what)),
      hint_(std::move(hint)),
      where_(where_string(where)) {}

void throw_error(std::string what, std::string hint, std::source_location where) {
  throw Error(std::move(what), std::move(hint), where);
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

}  // namespace strata
