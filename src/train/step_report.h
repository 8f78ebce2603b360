// What the trainer reports of a step (S12: train() as setup, a step loop and reporters):
// the timeline object of a metrics.jsonl line, and the progress line on stderr.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "train/trainer.h"

namespace strata {

// {"wall_s", "busy_s": {compute, comm, d2h, h2d, cpu_adam, host_sum}, "bytes": {d2h, h2d,
// h2n, n2h, comm, inter_node}, "overlap"}
nlohmann::json timeline_json(const StepTimeline& t);

// "H:MM:SS"
std::string format_duration(double seconds);

// "step N/M | loss … | lr … | norm … | … tok/s | ETA …" (no line ending)
std::string progress_line(int64_t step, int64_t steps, double loss, double lr, double norm, double tokens_per_s,
                          double eta_s);

}  // namespace strata
