#include "bench/bench_offload.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/bench_nvme.h"
#include "core/dtype.h"
#include "core/error.h"
#include "train/option_registry.h"
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
    m.t.d2h_bytes += t.d2h_bytes, m.t.h2d_bytes += t.h2d_bytes, m.t.n2h_bytes += t.n2h_bytes;
    m.t.h2n_bytes += t.h2n_bytes;
  }
  if (n == 0) return m;
  for (double* x : {&m.t.wall_s, &m.t.compute_s, &m.t.comm_s, &m.t.d2h_s, &m.t.h2d_s, &m.t.cpu_adam_s, &m.t.host_sum_s})
    *x /= n;
  for (uint64_t* x : {&m.t.d2h_bytes, &m.t.h2d_bytes, &m.t.n2h_bytes, &m.t.h2n_bytes}) *x /= uint64_t(n);
  m.step_s = m.t.wall_s;
  return m;
}

// The drive under the NVMe run: fio on the swap file's path (the run has closed and removed
// it) with the store's request size and queue depth, reading, writing, and both at once in
// the step's proportion (the engine reads the next chunk while it writes the last). Each
// the best of two: this is a bound, so the drive gets its best showing.
struct Drive {
  double read_bps = -1, write_bps = -1, mixed_bps = -1;
};
Drive measure_drive(const OffloadBenchOptions& o, const TrainOptions& t, double read_share) {
  Drive d;
  const std::string fio = find_fio(o.fio);
  if (fio == "none") return d;
  const std::string file = (std::filesystem::path(o.nvme_path) / "strata-rank0.swap").string();
  const long long req = (long long)t.aio_block_size;
  const int mix = std::clamp(int(std::lround(read_share * 100)), 1, 99);
  for (int k = 0; k < 2; ++k) {
    d.write_bps = std::max(d.write_bps, fio_bandwidth(fio, file, true, o.fio_bytes, req, t.aio_queue_depth));
    d.read_bps = std::max(d.read_bps, fio_bandwidth(fio, file, false, o.fio_bytes, req, t.aio_queue_depth));
    d.mixed_bps = std::max(d.mixed_bps, fio_mixed_bandwidth(fio, file, mix, o.fio_bytes, req, t.aio_queue_depth));
  }
  std::filesystem::remove(file);
  return d;
}

}  // namespace

int run_offload_bench(const OffloadBenchOptions& o) {
  const bool nvme = o.tier == "nvme";
  STRATA_CHECK(o.tier == "cpu" || nvme, "--tier " + o.tier, "use cpu or nvme");
  STRATA_CHECK(!nvme || !o.nvme_path.empty(), "--tier nvme without --nvme-path", "give --nvme-path DIR on the drive");
  TrainOptions t;
  t.model = o.model;
  t.seq_len = o.seq_len;
  t.micro_batch = o.micro_batch;
  t.steps = o.warmup + o.steps;
  t.zero_stage = o.stage;
  t.precision = parse_dtype(o.precision);
  // In RAM: clipping off, so the speculative update is never redone (the common case being
  // measured); on NVMe train's default, under which auto does not speculate.
  t.grad_clip = o.grad_clip >= 0 ? o.grad_clip : nvme ? 1.0 : 0.0;
  t.warmup = 1;
  t.quiet = true;
  t.reduce_bucket_size = o.reduce_bucket_size;
  t.device_threads = o.device_threads;
  find_train_option("device")->set(t, o.device);
  t.threads = o.device_threads;
  t.out = (std::filesystem::temp_directory_path() / ("strata_bench_offload_" + std::to_string(getpid()))).string();
  // The same configuration with everything on the device, no budget: the device's threads
  // do the Adam too (a GPU does not get faster when nothing is offloaded).
  const TrainResult plain = o.baselines ? train(t) : TrainResult{};
  t.offload_optimizer = zero::OffloadTier::cpu;
  t.offload_param = o.offload_param == "none" ? zero::OffloadTier::none : zero::OffloadTier::cpu;
  t.offload_ratio = o.offload_ratio;
  find_train_option("speculative-step")->set(t, o.speculative);  // as typed, checked by the registry
  t.host_threads = o.host_threads;
  t.bind_cpus = true;
  if (o.host_mem > 0) t.host_mem = size_t(o.host_mem);
  const TrainResult off = o.baselines || !nvme ? train(t) : TrainResult{};  // in host RAM
  TrainResult on_nvme;
  Drive drive;
  if (nvme) {
    t.offload_optimizer = zero::OffloadTier::nvme;
    t.offload_param = o.offload_param == "none" ? zero::OffloadTier::none : zero::OffloadTier::nvme;
    t.nvme_path = o.nvme_path;
    on_nvme = train(t);
    const Mean n = timed_mean(on_nvme, o.warmup);
    drive = measure_drive(o, t, double(n.t.n2h_bytes) / double(std::max<uint64_t>(1, n.t.n2h_bytes + n.t.h2n_bytes)));
  }
  const Mean p = timed_mean(plain, o.warmup), ram = timed_mean(off, o.warmup);
  const Mean m = nvme ? timed_mean(on_nvme, o.warmup) : ram;
  const double ratio = p.step_s > 0 ? m.step_s / p.step_s : 0;
  std::printf("bench offload: %.1fM parameters, stage %d, %s, %d tokens/step, device %d thread(s), host %d, %s%s\n",
              double((nvme ? on_nvme : off).num_params) / 1e6, o.stage, o.precision.c_str(), o.micro_batch * o.seq_len,
              o.device_threads, o.host_threads, nvme ? "states on NVMe in " : "states in host RAM",
              nvme ? o.nvme_path.c_str() : "");
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
  nlohmann::json j = {{"bench", "offload"},
                      {"params", (nvme ? on_nvme : off).num_params},
                      {"stage", o.stage},
                      {"precision", o.precision},
                      {"tier", o.tier},
                      {"grad_clip", t.grad_clip},
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
  if (!o.baselines) j.erase("step_ratio"), j.erase("device_step_s");
  if (nvme) {
    // The CPU Adam's busy time on NVMe includes its waits for the drive; in RAM it is the
    // kernel alone (the same chunks, the same step).
    const double adam_ratio = ram.t.cpu_adam_s > 0 ? m.t.cpu_adam_s / ram.t.cpu_adam_s : 0;
    std::printf("NVMe: n2h %.1f MB, h2n %.1f MB per step; CPU Adam busy %.1f ms against %.1f ms in RAM (%.2f×)\n",
                double(m.t.n2h_bytes) / 1e6, double(m.t.h2n_bytes) / 1e6, m.t.cpu_adam_s * 1e3, ram.t.cpu_adam_s * 1e3,
                adam_ratio);
    j["n2h_bytes"] = m.t.n2h_bytes, j["h2n_bytes"] = m.t.h2n_bytes;
    if (o.baselines) j["cpu_adam_ram_s"] = ram.t.cpu_adam_s, j["cpu_adam_ratio"] = adam_ratio;
    j["fio_read_bps"] = drive.read_bps, j["fio_write_bps"] = drive.write_bps, j["fio_mixed_bps"] = drive.mixed_bps;
    if (drive.mixed_bps > 0) {
      // The step's bytes at fio's speed for the same mix: no engine moves them faster.
      const double bound = double(m.t.n2h_bytes + m.t.h2n_bytes) / drive.mixed_bps;
      std::printf(
          "drive: fio read %.0f MB/s, write %.0f MB/s, both at the step's mix %.0f MB/s (%s); drive_bound_s %.3f, "
          "drive_ratio %.3f\n",
          drive.read_bps / 1e6, drive.write_bps / 1e6, drive.mixed_bps / 1e6, o.nvme_path.c_str(), bound,
          bound / m.t.wall_s);
      j["drive_bound_s"] = bound, j["drive_ratio"] = bound / m.t.wall_s;
    } else {
      std::printf("drive: fio not run (%s): no drive_bound_s or drive_ratio\n",
                  find_fio(o.fio) == "none" ? "not installed: apt-get install fio" : "it failed");
    }
  }
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace strata::bench
