// OUT/metrics.jsonl: one JSON object per logged step, flushed as written so a killed run
// keeps what it logged, and synced to disk before each checkpoint so the log holds every step
// a checkpoint covers.
#pragma once
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace strata {

class MetricsLog {
 public:
  // Creates the directory and truncates the file; a resumed run (resumed_step >= 0) keeps the
  // lines of steps up to resumed_step (rewritten through a temporary file and a rename) and
  // appends after them.
  explicit MetricsLog(const std::string& out_dir, int64_t resumed_step = -1);
  ~MetricsLog();
  void write(const nlohmann::json& record);
  void sync();  // fsync: what was written survives a crash of the machine too
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace strata
