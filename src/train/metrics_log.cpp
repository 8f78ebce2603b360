#include "train/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace strata {

MetricsLog::MetricsLog(const std::string& out_dir) : path_(out_dir + "/metrics.jsonl") {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  STRATA_CHECK(!ec, "cannot create output directory '" + out_dir + "': " + ec.message(), "check --out");
  f_ = std::fopen(path_.c_str(), "w");
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

}  // namespace strata
