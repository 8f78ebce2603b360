#include "bench/bench_offload.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "train/trainer.h"

namespace strata::bench {

namespace {

struct Mean {
  StepTimeline t;
  double step_s = 0;
};

// Mean timeline over the timed steps (after the warm-up).
Mean timed_mean(const TrainResult& r, int warmup) {
  Mean m;
  int n = 0;
  for (size_t i = size_t(warmup); i < r.steps.size(); ++i, ++n) {
    const StepTimeline& t = r.steps[i].timeline;
    m.t.wall_s += t.wall_s, m.t.compute_s += t.compute_s, m.t.comm_s += t.comm_s;
    m.t.d2h_s += t.d2h_s, m.t.h2d_s += t.h2d_s, m.t.cpu_adam_s += t.cpu_adam_s, m.t.host_sum_s += t.host_sum_s;
    m.t.d2h_bytes += t.d2h_bytes, m.t.h2d_bytes += t.h2d_bytes;
  }
  if (n == 0) return m;
  for (double* x : {&m.t.wall_s, &m.t.compute_s, &m.t.comm_s, &m.t.d2h_s, &m.t.h2d_s, &m.t.cpu_adam_s, &m.t.host_sum_s})
    *x /= n;
  m.t.d2h_bytes /= uint64_t(n), m.t.h2d_bytes /= uint64_t(n);
  m.step_s = m.t.wall_s;
  return m;
}

}  // namespace

int run_offload_bench(const OffloadBenchOptions& o) {
  TrainOptions t;
  t.model = o.model;
  t.seq_len = o.seq_len;
  t.micro_batch = o.micro_batch;
  t.steps = o.warmup + o.steps;
  t.zero_stage = o.stage;
  t.precision = parse_dtype(o.precision);
  t.grad_clip = 0;  // the speculative update is never redone: the common case being measured
  t.warmup = 1;
  t.quiet = true;
  t.reduce_bucket_size = o.reduce_bucket_size;
  t.device_threads = o.device_threads;
  t.device = o.device;
  t.threads = o.device_threads;
  t.out = (std::filesystem::temp_directory_path() / ("strata_bench_offload_" + std::to_string(getpid()))).string();
  // The same configuration with everything on the device, no budget: the device's threads
  // do the Adam too (a GPU does not get faster when nothing is offloaded).
  const TrainResult plain = train(t);
  t.offload_optimizer = "cpu";
  t.offload_param = o.offload_param;
  t.offload_ratio = o.offload_ratio;
  t.speculative_step = o.speculative;
  t.host_threads = o.host_threads;
  t.bind_cpus = true;
  const TrainResult off = train(t);
  const Mean p = timed_mean(plain, o.warmup), m = timed_mean(off, o.warmup);
  const double ratio = p.step_s > 0 ? m.step_s / p.step_s : 0;
  std::printf("bench offload: %.1fM parameters, stage %d, %s, %d tokens/step, device %d thread(s), host %d\n",
              double(off.num_params) / 1e6, o.stage, o.precision.c_str(), o.micro_batch * o.seq_len, o.device_threads,
              o.host_threads);
  std::printf("%-22s %10s %10s\n", "engine busy (ms/step)", "offload", "device");
  auto row = [](const char* name, double a, double b) { std::printf("%-22s %10.2f %10.2f\n", name, a * 1e3, b * 1e3); };
  row("compute", m.t.compute_s, p.t.compute_s);
  row("comm", m.t.comm_s, p.t.comm_s);
  row("d2h", m.t.d2h_s, p.t.d2h_s);
  row("h2d", m.t.h2d_s, p.t.h2d_s);
  row("cpu_adam", m.t.cpu_adam_s, p.t.cpu_adam_s);
  row("host_sum", m.t.host_sum_s, p.t.host_sum_s);
  row("wall", m.t.wall_s, p.t.wall_s);
  std::printf("overlap (max busy / wall) %.3f; offloaded step / device step %.3f; d2h %.1f MB, h2d %.1f MB per step\n",
              m.t.overlap(), ratio, double(m.t.d2h_bytes) / 1e6, double(m.t.h2d_bytes) / 1e6);
  const nlohmann::json j = {{"bench", "offload"},
                            {"params", off.num_params},
                            {"stage", o.stage},
                            {"precision", o.precision},
                            {"tokens_per_step", o.micro_batch * o.seq_len},
                            {"offload_ratio", o.offload_ratio},
                            {"busy_s",
                             {{"compute", m.t.compute_s},
                              {"comm", m.t.comm_s},
                              {"d2h", m.t.d2h_s},
                              {"h2d", m.t.h2d_s},
                              {"cpu_adam", m.t.cpu_adam_s},
                              {"host_sum", m.t.host_sum_s}}},
                            {"wall_s", m.t.wall_s},
                            {"device_step_s", p.step_s},
                            {"overlap", m.t.overlap()},
                            {"step_ratio", ratio},
                            {"d2h_bytes", m.t.d2h_bytes},
                            {"h2d_bytes", m.t.h2d_bytes}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace strata::bench
