#include "core/text_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace strata {

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  STRATA_CHECK(f, "cannot create '" + tmp + "': " + std::strerror(errno), "check the directory exists and is writable");
  const bool wrote = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int err = errno;
  if (std::fclose(f) != 0 || !wrote) {
    std::remove(tmp.c_str());
    throw_error("cannot write '" + path + "': " + std::strerror(wrote ? errno : err),
                "free space on that file system, or write elsewhere");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(e), "check permissions");
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  STRATA_CHECK(f.good(), "cannot open '" + path + "'", "check the path");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace strata
