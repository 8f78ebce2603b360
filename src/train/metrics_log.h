// OUT/metrics.jsonl: one JSON object per logged step, flushed as written so a killed run
// keeps what it logged.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& out_dir);  // creates the directory; truncates the file
  ~MetricsLog();
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace strata
