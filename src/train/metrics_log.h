// OUT/metrics.jsonl: one JSON object per logged step, flushed as written so a killed run
// keeps what it logged.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

class MetricsLog {
 public:
  // Creates the directory and truncates the file; a resumed run (resumed_step >= 0) keeps the
  // lines of steps up to resumed_step and appends after them.
  explicit MetricsLog(const std::string& out_dir, int64_t resumed_step = -1);
  ~MetricsLog();
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace strata
