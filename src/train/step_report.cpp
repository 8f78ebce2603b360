#include "train/step_report.h"

#include <cstdio>

namespace strata {

nlohmann::json timeline_json(const StepTimeline& t) {
  return {{"wall_s", t.wall_s},
          {"busy_s",
           {{"compute", t.compute_s},
            {"comm", t.comm_s},
            {"d2h", t.d2h_s},
            {"h2d", t.h2d_s},
            {"cpu_adam", t.cpu_adam_s},
            {"host_sum", t.host_sum_s}}},
          {"bytes",
           {{"d2h", t.d2h_bytes},
            {"h2d", t.h2d_bytes},
            {"h2n", t.h2n_bytes},
            {"n2h", t.n2h_bytes},
            {"comm", t.comm_bytes},
            {"inter_node", t.inter_node_bytes}}},
          {"overlap", t.overlap()}};
}

std::string format_duration(double seconds) {
  char buf[32];
  const long t = long(seconds + 0.5);
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

std::string progress_line(int64_t step, int64_t steps, double loss, double lr, double norm, double tokens_per_s,
                          double eta_s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "step %6lld/%lld | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s | ETA %s",
                (long long)step, (long long)steps, loss, lr, norm, tokens_per_s, format_duration(eta_s).c_str());
  return buf;
}

}  // namespace strata
