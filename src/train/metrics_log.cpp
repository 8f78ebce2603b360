#include "train/metrics_log.h"

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
  std::string kept;  // a resumed run's history up to its checkpoint (later lines were not committed)
  if (resumed_step >= 0) {
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
          j["step"].get<int64_t>() <= resumed_step)
        kept += line + "\n";
    }
  }
  f_ = std::fopen(path_.c_str(), "w");
  if (f_ && !kept.empty()) std::fwrite(kept.data(), 1, kept.size(), f_);
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
