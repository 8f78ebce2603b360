// DeepSpeed's monitors, fed each logged step's metrics.jsonl record: TensorBoard event files
// (--tensorboard DIR; a config's tensorboard block) and CSV files (--csv-dir DIR; csv_monitor),
// one per tag with DeepSpeed's layout (TAG with '/' as '_' .csv: a "step,NAME" header, then
// "step,value" rows). Tags are DeepSpeed's where it has them (Train/Samples/train_loss,
// Train/Samples/lr, Train/Samples/loss_scale), plus the grad norm, tokens/s and each tier
// edge's bytes per step; the x axis is the samples seen, as DeepSpeed plots them.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "io/tf_events.h"

namespace strata {

class RunMonitors {
 public:
  // "" for a monitor that is off.
  RunMonitors(const std::string& tensorboard_dir, const std::string& csv_dir);
  void write(const nlohmann::json& record, int64_t samples);

 private:
  void scalar(const std::string& tag, double value, int64_t samples);
  std::unique_ptr<io::TfEventWriter> tensorboard_;
  std::string csv_dir_;
  std::set<std::string> csv_files_;  // the ones this run has written to (with their header)
};

}  // namespace strata
