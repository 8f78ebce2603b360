// What the trainer reports of a step (train() is setup, a step loop and these reporters):
// the timeline object of a metrics.jsonl line, and the progress line on stderr.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "train/metrics_log.h"
#include "train/run_monitors.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace strata {

// {"wall_s", "busy_s": {compute, comm, d2h, h2d, cpu_adam, host_sum}, "bytes": {d2h, h2d,
// h2n, n2h, comm, inter_node}, "overlap"}
nlohmann::json timeline_json(const StepTimeline& t);

// "H:MM:SS"
std::string format_duration(double seconds);

// "step N/M | loss … | lr … | norm … | … tok/s | ETA …" (no line ending)
std::string progress_line(int64_t step, int64_t steps, double loss, double lr, double norm, double tokens_per_s,
                          double eta_s);

// " | eval loss L (ppl P)": what the progress line adds after a validation.
std::string eval_text(double eval_loss);

// The run's reports: the start-up line, a metrics.jsonl line every --log-every steps (with
// every rank's model-state bytes and collective bytes), the progress line, and the closing
// line. Rank 0 writes; the constructor and logged steps are collective.
class StepReporter {
 public:
  // Prints the start-up line and gathers every rank's model-state bytes, which it also
  // records in result.
  StepReporter(const TrainingRun& run, double tokens_per_step, TrainResult& result);
  void step(const StepRecord& record);
  void sync();  // the metrics written so far on the drive (before a checkpoint)
  void done(const TrainResult& result);

 private:
  const TrainingRun& run_;
  const double tokens_per_step_;
  const bool tty_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<RunMonitors> monitors_;                                              // --tensorboard, --csv-dir
  nlohmann::json param_bytes_, grad_bytes_, optim_bytes_, comm_buffers_, host_bytes_;  // per rank
  std::vector<int64_t> comm_bytes_;  // per rank: bytes sent per step since the last log
  uint64_t comm_at_last_log_ = 0;
  int64_t steps_since_log_ = 0;
  double smoothed_tps_ = 0;
};

}  // namespace strata
