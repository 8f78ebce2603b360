#include "train/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace strata {

MetricsLog::MetricsLog(const std::string& out_dir, int64_t resumed_step) : path_(out_dir + "/metrics.jsonl") {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  STRATA_CHECK(!ec, "cannot create output directory '" + out_dir + "': " + ec.message(), "check --out");
  if (resumed_step >= 0) {
    // The history up to the checkpoint (later lines were never committed) goes through a
    // temporary file and a rename, so a kill at any moment leaves either the old log or the
    // new one, never a truncated one.
    std::string kept;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= resumed_step)
        kept += line + "\n";
    }
    const std::string tmp = path_ + ".tmp";
    f_ = std::fopen(tmp.c_str(), "w");
    STRATA_CHECK(f_, "cannot open '" + tmp + "' for writing: " + std::strerror(errno), "check --out");
    const bool ok =
        std::fwrite(kept.data(), 1, kept.size(), f_) == kept.size() && std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
    const int e = errno;
    std::fclose(f_), f_ = nullptr;
    STRATA_CHECK(ok, "writing '" + tmp + "' failed: " + std::strerror(e), "is the disk full?");
    std::filesystem::rename(tmp, path_, ec);
    STRATA_CHECK(!ec, "cannot rename '" + tmp + "' to '" + path_ + "': " + ec.message(), "check --out");
  }
  f_ = std::fopen(path_.c_str(), resumed_step >= 0 ? "a" : "w");
  STRATA_CHECK(f_, "cannot open '" + path_ + "' for writing: " + std::strerror(errno), "check --out");
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  const bool ok = std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0;
  STRATA_CHECK(ok, "writing '" + path_ + "' failed: " + std::strerror(errno), "is the disk full?");
}

void MetricsLog::sync() {
  const bool ok = std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
  STRATA_CHECK(ok, "syncing '" + path_ + "' failed: " + std::strerror(errno), "is the disk full?");
}

}  // namespace strata
