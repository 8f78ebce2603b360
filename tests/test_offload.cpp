// Tiers and offload under real mpirun (1-4 ranks): every offload combination at stages 1-3
// gives the per-step losses and final parameters of the single-rank, non-offloaded run
// within the ZeRO equivalence tolerance (f32: |Δloss| <= 1e-5 at each of 20 steps, parameters within
// 5e-5 + 1e-4·|ref|); the speculative host update is redone when clipping demands it and
// discarded on an fp16 overflow; the host tier's budget is enforced.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>

#include "comm/mpi_comm.h"
#include "io/nvme_store.h"
#include "mpi_test_main.h"
#include "test_util.h"
#include "train/planner.h"
#include "train/trainer.h"
#include "zero/partition.h"

namespace strata {
namespace {

MpiComm* world = nullptr;
constexpr int kGlobalBatch = 24;

TrainOptions base(const std::string& tag) {
  TrainOptions o;
  o.model = test::source_path("configs/gpt2-tiny-bytes.json");
  o.data = test::source_path("data/default.txt");
  o.steps = 20;
  o.seq_len = 16;
  o.warmup = 3;
  o.lr = 1e-3;
  o.quiet = true;
  o.out = (std::filesystem::temp_directory_path() /
           ("strata_offload_" + tag + "_" + std::to_string(getpid()) + "_r" + std::to_string(world->rank())))
              .string();
  return o;
}

std::string nvme_dir() {
  const std::filesystem::path d = std::filesystem::temp_directory_path() /
                                  ("strata_nvme_" + std::to_string(getpid()) + "_r" + std::to_string(world->rank()));
  std::filesystem::create_directories(d);
  return d.string();
}

struct Case {
  int stage = 1, accum = 1;
  std::string optimizer = "cpu", param = "none";
  double ratio = 1.0;
  bool speculative = true;
  DType precision = DType::f32;
  double grad_clip = 1.0;
  int initial_scale_power = 16;
  std::string moments = "f32", master = "f32", rounding = "stochastic";  // the optimizer states' dtypes
  std::string name() const {
    return "stage " + std::to_string(stage) + ", accum " + std::to_string(accum) + ", optimizer " + optimizer +
           " (ratio " + std::to_string(ratio) + (speculative ? ", speculative" : ", exact") + "), param " + param +
           ", " + std::string(dtype_name(precision)) + ", clip " + std::to_string(grad_clip) + ", states " + moments +
           "/" + master + " " + rounding + ", " + std::to_string(world->size()) + " ranks";
  }
};

TrainOptions options_for(const Case& c, bool distributed) {
  TrainOptions o = base(distributed ? "dist" : "ref");
  o.grad_accum = c.accum;
  o.precision = c.precision;
  o.grad_clip = c.grad_clip;
  o.initial_scale_power = c.initial_scale_power;
  o.loss_scale_window = 5;
  o.micro_batch = kGlobalBatch / c.accum / (distributed ? world->size() : 1);
  test::set_option(o, "optimizer-state-dtype", c.moments);
  test::set_option(o, "master-dtype", c.master);
  test::set_option(o, "state-rounding", c.rounding);
  if (!distributed && (c.moments != "f32" || c.master != "f32"))  // 16-bit states live on the host
    o.zero_stage = 1, o.offload_optimizer = zero::OffloadTier::cpu;
  if (distributed) {
    o.zero_stage = c.stage;
    o.sub_group_size = 700;
    o.reduce_bucket_size = 1500;  // several buckets, cut across sub-groups
    o.allgather_bucket_size = 2500;
    o.param_persistence_threshold = 300;
    test::set_option(o, "offload-optimizer", c.optimizer);
    test::set_option(o, "offload-param", c.param);
    o.offload_ratio = c.ratio;
    o.speculative_step = c.speculative ? zero::Speculation::on : zero::Speculation::off;
    o.pin_buffer_count = 3;
    o.pin_buffer_size = 4096;  // chunks smaller than a bucket
    if (c.optimizer == "nvme") {
      o.nvme_path = nvme_dir();
      o.nvme_checksum = true;
      o.aio_queue_depth = 4;
      o.aio_block_size = 8192;
      o.pin_buffer_size = 16384;  // 4096-element chunks: several per bucket, block-aligned
      o.sub_group_size = 3000, o.reduce_bucket_size = 20000, o.allgather_bucket_size = 20000;
    }
  }
  // One compute thread whether or not anything is offloaded (which splits the CPUs) and
  // however the test is started (mpirun binds a rank to one core; alone it sees them all):
  // the loss's sums then run in the same order in every case, as the bitwise checks need.
  o.device_threads = 1;
  return o;
}

const TrainResult& reference(const Case& c) {
  static std::map<std::string, TrainResult> cache;
  const std::string key = std::to_string(c.accum) + std::string(dtype_name(c.precision)) + std::to_string(c.grad_clip) +
                          "/" + std::to_string(c.initial_scale_power) + c.moments + c.master + c.rounding;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, test::train_on(nullptr, options_for(c, false))).first;
  return it->second;
}

TrainResult expect_equivalent(const Case& c) {
  const TrainResult& a = reference(c);
  const TrainResult b = test::train_on(world, options_for(c, true));
  EXPECT_EQ(a.steps.size(), b.steps.size());
  const bool f16 = c.precision == DType::f16;
  for (size_t i = 0; i < std::min(a.steps.size(), b.steps.size()); ++i) {
    EXPECT_NEAR(b.steps[i].loss, a.steps[i].loss, f16 ? 2e-3 : 1e-5) << c.name() << ", step " << i + 1;
    EXPECT_EQ(b.steps[i].skipped, a.steps[i].skipped) << c.name() << ", step " << i + 1;
  }
  test::expect_close(b.final_params.data(), a.final_params.data(), a.final_params.size(), f16 ? 2e-3 : 5e-5,
                     f16 ? 2e-2 : 1e-4, "final parameters, " + c.name());
  EXPECT_EQ(b.steady_state_allocations, 0u) << c.name();
  if (c.ratio > 0) {
    EXPECT_GT(b.host_bytes, 0u) << c.name();
  }
  return b;
}

TEST(Offload, OptimizerOnTheHostMatchesEveryStage) {
  for (int stage = 1; stage <= 3; ++stage) {
    for (int accum : {1, 2}) {
      const TrainResult r = expect_equivalent({.stage = stage, .accum = accum});
      // Kept unless the step clipped (early steps here have norms above 1): then redone.
      EXPECT_EQ(r.speculative_commits + r.speculative_redos, 20);
      EXPECT_GT(r.speculative_commits, 0);
      EXPECT_GT(r.steps.back().timeline.d2h_bytes, 0u);
      EXPECT_GT(r.steps.back().timeline.h2d_bytes, 0u);
    }
  }
}

TEST(Offload, PartOfTheOptimizerStaysOnTheDevice) {
  for (int stage = 1; stage <= 3; ++stage)
    for (double ratio : {0.5, 0.0}) expect_equivalent({.stage = stage, .accum = 2, .ratio = ratio});
}

TEST(Offload, ParametersOnTheHost) {
  for (int accum : {1, 2}) expect_equivalent({.stage = 3, .accum = accum, .param = "cpu"});
  expect_equivalent({.stage = 3, .param = "cpu", .precision = DType::bf16});
}

TEST(Offload, ExactModeUpdatesAfterTheNorm) {
  for (int stage = 1; stage <= 3; ++stage) {
    const TrainResult r = expect_equivalent({.stage = stage, .accum = 2, .speculative = false});
    EXPECT_EQ(r.speculative_commits + r.speculative_redos, 0);
  }
  expect_equivalent({.stage = 3, .param = "cpu", .speculative = false});
}

// Clipping on every step: each speculative update (made with scale 1) is redone from the
// committed copy with the clip scale, and the run still matches the reference.
TEST(Offload, ClippingRedoesTheSpeculativeUpdate) {
  for (int stage = 1; stage <= 3; ++stage) {
    const TrainResult r = expect_equivalent({.stage = stage, .grad_clip = 0.05});
    EXPECT_EQ(r.speculative_redos, 20) << "stage " << stage;
    EXPECT_EQ(r.speculative_commits, 0) << "stage " << stage;
  }
  expect_equivalent({.stage = 3, .param = "cpu", .grad_clip = 0.05});
}

// fp16 overflow: the speculative update is discarded (its copy-out undone), the step skipped
// on every rank, exactly as without offload.
TEST(Offload, Fp16OverflowDiscardsTheSpeculativeUpdate) {
  for (int stage = 1; stage <= 3; ++stage) {
    const TrainResult r = expect_equivalent({.stage = stage, .precision = DType::f16, .initial_scale_power = 24});
    EXPECT_GT(r.speculative_discards, 0) << "stage " << stage;
  }
  const TrainResult r =
      expect_equivalent({.stage = 3, .param = "cpu", .precision = DType::f16, .initial_scale_power = 24});
  EXPECT_GT(r.speculative_discards, 0);
}

// The paper's point: a model whose states are many times the device's memory trains with
// stage 3, everything offloaded and activation checkpoints in host RAM; the device's peak
// (the budget's high-water mark) stays under --device-mem, and the losses equal those of
// the same run without offload and without a budget.
TEST(Offload, ModelStatesEightTimesTheDeviceBudget) {
  TrainOptions o = base("big");
  o.model = test::source_path("configs/gpt2-deep-narrow.json");
  o.seq_len = 32;
  o.micro_batch = 2;
  o.steps = 3;
  o.zero_stage = 3;
  o.reduce_bucket_size = o.allgather_bucket_size = 100000;
  o.param_persistence_threshold = 1000;
  o.prefetch_depth = 1;
  o.activation_checkpointing = true;
  o.device_threads = o.host_threads = 1;
  const TrainResult plain = test::train_on(world, o, false);
  o.offload_optimizer = o.offload_param = o.offload_activations = zero::OffloadTier::cpu;
  o.device_mem = size_t(10) << 20;
  const TrainResult r = test::train_on(world, o, false);
  const double states = 16.0 * double(r.num_params);
  EXPECT_GE(states, 8.0 * double(o.device_mem)) << "the model must be big for the budget";
  EXPECT_LE(r.device_high_water, o.device_mem);
  EXPECT_GT(r.host_bytes, size_t(12.0 * double(r.num_params) / world->size())) << "master, m, v on the host";
  for (size_t i = 0; i < r.steps.size(); ++i) EXPECT_NEAR(r.steps[i].loss, plain.steps[i].loss, 1e-5) << i + 1;
  EXPECT_GT(r.steps.back().timeline.d2h_bytes, 0u);
}

// The same with the optimizer (and stage-3 parameters) on NVMe, swapped through io_uring.
TEST(Nvme, OptimizerOnNvmeMatchesEveryStage) {
  for (int stage = 1; stage <= 3; ++stage) {
    const TrainResult r = expect_equivalent({.stage = stage, .accum = 2, .optimizer = "nvme"});
    EXPECT_GT(r.steps.back().timeline.h2n_bytes, 0u);
    EXPECT_GT(r.steps.back().timeline.n2h_bytes, 0u);
  }
  expect_equivalent({.stage = 3, .optimizer = "nvme", .param = "nvme"});
  expect_equivalent({.stage = 3, .optimizer = "nvme", .param = "nvme", .precision = DType::bf16});
  expect_equivalent({.stage = 2, .optimizer = "nvme", .ratio = 0.5});
  const TrainResult exact = expect_equivalent({.stage = 2, .optimizer = "nvme", .speculative = false});
  EXPECT_EQ(exact.speculative_commits + exact.speculative_redos, 0);
}

TEST(Nvme, ClippingAndOverflowOnNvme) {
  EXPECT_EQ(expect_equivalent({.stage = 3, .optimizer = "nvme", .param = "nvme", .grad_clip = 0.05}).speculative_redos,
            20);
  EXPECT_GT(expect_equivalent({.stage = 2, .optimizer = "nvme", .precision = DType::f16, .initial_scale_power = 24})
                .speculative_discards,
            0);
}

// With parameters and optimizer on NVMe at stage 3, every step moves exactly the bytes
// strata plan states on each tier edge, and the drive carries at most 1.15× the least it
// must, for host budgets from nothing to spare (every unit re-read in every pass) to
// generous (every unit kept in RAM from its first fetch of a step to the step's end).
TEST(Nvme, StepTrafficIsThePlansFromTightToGenerousHostBudgets) {
  uint64_t f32_excess[4] = {};
  for (const char* states : {"f32", "bf16"}) {  // and with a bf16 master, m and v
    const bool narrow = std::string(states) != "f32";
    const Case c{.stage = 3,
                 .accum = 2,
                 .optimizer = "nvme",
                 .param = "nvme",
                 .precision = DType::bf16,
                 .moments = states,
                 .master = states};
    TrainOptions o = options_for(c, true);
    o.speculative_step = zero::Speculation::automatic;  // on NVMe with clipping on: no speculation, no redone update
    o.steps = 3;
    const ModelSpec spec = ModelSpec::load(o.model);
    PlanInput in = plan_input_for(spec, world->size());
    in.sub_group_size = o.sub_group_size, in.persistence_threshold = o.param_persistence_threshold;
    in.padded_psi = padded_param_count(spec, world->size(), o.sub_group_size);
    in.reduce_bucket = o.reduce_bucket_size, in.allgather_bucket = o.allgather_bucket_size;
    in.pin_buffers = o.pin_buffer_count, in.pin_buffer_bytes = int64_t(o.pin_buffer_size);
    in.micro_batch = o.micro_batch, in.seq_len = o.seq_len, in.threads = 1, in.mixed = true;
    in.grad_accum = o.grad_accum, in.grad_clip = o.grad_clip, in.speculative_step = o.speculative_step;
    in.states.master = in.states.moments = parse_dtype(states);
    auto row_for = [&](double host_bytes) {
      in.host_bytes = host_bytes;
      return *find_plan_row(make_plan(in), 3, "nvme+param", false);
    };
    // The host tier without the parameter cache (a budget of 1 byte keeps none) and with all of it.
    const double none = row_for(1).host, all = row_for(0).host;
    ASSERT_GT(all, none) << "the plan keeps no parameters in RAM even without a budget";
    for (int fi = 0; fi < 4; ++fi) {
      const double f = std::array{0.0, 0.35, 0.7, 1.0}[size_t(fi)];
      o.host_mem = size_t(none + f * (all - none));
      const PlanRow row = row_for(double(o.host_mem));
      const TrainResult r = test::train_on(world, o, false);
      const std::string what = "host budget " + std::to_string(o.host_mem) + " (" + std::to_string(f) +
                               " of the cache), " + std::to_string(world->size()) + " ranks, " + states + " states";
      EXPECT_EQ(double(r.host_high_water), row.host) << what;
      ASSERT_EQ(r.steps.size(), 3u);
      EXPECT_EQ(r.speculative_redos, 0) << what;
      for (const StepRecord& s : r.steps) {
        const StepTimeline& t = s.timeline;
        const std::string at = what + ", step " + std::to_string(s.step);
        EXPECT_EQ(t.n2h_bytes, row.traffic.n2h) << at;
        EXPECT_EQ(t.h2n_bytes, row.traffic.h2n) << at;
        EXPECT_EQ(t.h2d_bytes, row.traffic.h2d) << at;
        EXPECT_EQ(t.d2h_bytes, row.traffic.d2h) << at;
      }
      // f32 states: within 1.15x of the least. 16-bit states shrink the least; what the
      // drive carries beyond it is the same bytes as with f32 states (the parameter cache's
      // whole-unit reads), nothing of their own.
      const uint64_t excess = row.traffic.n2h - row.traffic.min_n2h;
      if (narrow) {
        EXPECT_EQ(excess, f32_excess[size_t(fi)]) << what;
      } else {
        EXPECT_LE(double(row.traffic.n2h), 1.15 * double(row.traffic.min_n2h)) << what;
        f32_excess[size_t(fi)] = excess;
      }
      EXPECT_LE(double(row.traffic.h2n), 1.15 * double(row.traffic.min_h2n)) << what;
      // With room for every parameter, the bound is each state and parameter once each way;
      // a bf16 master is the parameters, read for the forward pass and again by the CPU Adam
      // (2 of every 6 bytes written).
      if (f == 1.0) {
        EXPECT_EQ(row.traffic.min_n2h - row.traffic.min_h2n, narrow ? row.traffic.min_h2n / 3 : 0) << what;
      }
    }
  }
}

// Faults mid-run (single rank: another rank would wait for the failed one until the
// communication timeout): a read error, a full disk and a torn swap file each end the run
// with a clear error, and the committed state is exactly the last completed step's.
class ArmedFaults final : public io::IoFaults {
 public:
  std::atomic<int> mode{0};  // 0 off, 1 EIO on a read, 2 ENOSPC on a write (one failure, then off)
  int on_complete(bool write, uint64_t, size_t, int res) override {
    int expect = 1;
    if (!write && mode.compare_exchange_strong(expect, 0)) return -EIO;
    expect = 2;
    if (write && mode.compare_exchange_strong(expect, 0)) return -ENOSPC;
    return res;
  }
};

void expect_fault_keeps_last_step(int mode, const std::string& expect_in_message, bool param_nvme) {
  Case c{.stage = 3, .optimizer = "nvme", .param = param_nvme ? "nvme" : "none"};
  TrainOptions o = options_for(c, true);
  o.warmup = 0, o.min_lr_ratio = 1.0;  // constant lr: the first 3 steps of any run are the same
  TrainOptions ref = o;
  ref.steps = 3;
  const TrainResult after3 = test::train_on(world, ref);
  ArmedFaults faults;
  o.steps = 6;
  TrainContext watch;
  watch.comm = world, watch.nvme_faults = &faults;
  watch.on_step_begin = [&](int64_t step) {
    if (step != 3) return;
    if (mode == 3)  // torn: the swap file loses its tail behind the store's back
      std::filesystem::resize_file(o.nvme_path + "/strata-rank0.swap", 8192);
    else
      faults.mode = mode;
  };
  std::vector<float> committed;
  watch.on_step_error = [&](std::span<const float> p) { committed.assign(p.begin(), p.end()); };
  faults.mode = 0;
  try {
    train(o, watch);
    ADD_FAILURE() << "expected the fault to end the run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expect_in_message), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("strata-rank0.swap"), std::string::npos) << "names the file: " << e.what();
  }
  faults.mode = 0;
  if (mode == 3) return;  // the committed state itself was cut off: nothing to read back
  ASSERT_EQ(committed.size(), after3.final_params.size()) << "the committed state could not be read back";
  test::expect_close(committed.data(), after3.final_params.data(), committed.size(), 0, 0,
                     "committed parameters after a failed step 4");
}

WORLD_SIZES(1)
TEST(Nvme, ReadErrorLeavesTheLastCompletedStep) {
  if (world->size() > 1) GTEST_SKIP() << "fault injection runs on one rank";
  expect_fault_keeps_last_step(1, "Input/output error", false);
  expect_fault_keeps_last_step(1, "Input/output error", true);
}

WORLD_SIZES(1)
TEST(Nvme, FullDiskMidRunLeavesTheLastCompletedStep) {
  if (world->size() > 1) GTEST_SKIP() << "fault injection runs on one rank";
  expect_fault_keeps_last_step(2, "No space left", false);
}

WORLD_SIZES(1)
TEST(Nvme, TornSwapFileIsAClearError) {
  if (world->size() > 1) GTEST_SKIP() << "fault injection runs on one rank";
  expect_fault_keeps_last_step(3, "end of the file", false);
}

WORLD_SIZES(1)
TEST(Nvme, MissingOrUnusablePathIsAClearError) {
  TrainOptions o = options_for({.stage = 2, .optimizer = "nvme"}, true);
  o.nvme_path = "";
  try {
    test::train_on(world, o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--nvme-path"), std::string::npos) << e.what();
  }
  o.nvme_path = "/nonexistent/strata";
  try {
    test::train_on(world, o);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a directory"), std::string::npos) << e.what();
  }
  o = options_for({.stage = 3, .optimizer = "nvme", .param = "cpu"}, true);
  EXPECT_THROW(test::train_on(world, o), Error) << "parameters and optimizer on different tiers";
}

WORLD_SIZES(1)
TEST(Offload, HostBudgetIsEnforcedWithAClearError) {
  TrainOptions o = options_for({.stage = 2}, true);
  o.host_mem = 10000;  // less than the staging pool (3 × 4 KiB)
  try {
    test::train_on(world, o);
    ADD_FAILURE() << "expected a host budget error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("host memory budget exceeded"), std::string::npos) << m;
    EXPECT_NE(m.find("--host-mem"), std::string::npos) << m;
  }
}

// 16-bit optimizer states. Their rounding draws on (seed, step, model-flat index), so
// neither the tier (RAM or NVMe), the speculative or exact update, clipping's redo nor
// parameter offload changes a bit: on one rank every such run at stages 1-3 equals the
// stage-1 run, losses and final parameters bit for bit; on N ranks the runs that reduce
// gradients alike (stages 2-3, reduce-scatter) equal each other bit for bit. Against one
// rank, N ranks add their reduction's rounding as f32 states do, and a 16-bit state turns
// such a difference into a different rounding now and then: the losses agree within 2e-3
// and the parameters within 0.3% (relative rms; 1 bf16 ulp is 0.4%).
void expect_bitwise(const TrainResult& a, const TrainResult& b, const std::string& what) {
  ASSERT_EQ(a.steps.size(), b.steps.size()) << what;
  for (size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(b.steps[i].loss, a.steps[i].loss) << what << ", step " << i + 1;
  EXPECT_EQ(a.final_params, b.final_params) << what << ": final parameters differ";
}

TrainResult expect_same_bits(const Case& c, const TrainResult* peer = nullptr) {
  const TrainResult& a = reference(c);
  TrainResult b = test::train_on(world, options_for(c, true));
  EXPECT_EQ(b.steady_state_allocations, 0u) << c.name();
  if (world->size() == 1) {
    expect_bitwise(a, b, c.name());
  } else {
    for (size_t i = 0; i < std::min(a.steps.size(), b.steps.size()); ++i)
      EXPECT_NEAR(b.steps[i].loss, a.steps[i].loss, 2e-3) << c.name() << ", step " << i + 1;
    double se = 0, sr = 0;
    for (size_t i = 0; i < a.final_params.size(); ++i) {
      const double d = double(b.final_params[i]) - a.final_params[i];
      se += d * d, sr += double(a.final_params[i]) * a.final_params[i];
    }
    EXPECT_LE(std::sqrt(se / sr), 3e-3) << c.name() << ": final parameters' relative rms difference from one rank";
    if (peer) expect_bitwise(*peer, b, c.name() + " against stage 2 on as many ranks");
  }
  return b;
}

TEST(StateDtype, SixteenBitStatesGiveTheSameBitsInEveryStageAndTier) {
  for (const auto& [moments, master] :
       {std::pair{"bf16", "f32"}, std::pair{"bf16", "bf16"}, std::pair{"f32", "bf16"}}) {
    const DType p = DType::bf16;
    expect_same_bits({.stage = 1, .accum = 2, .precision = p, .moments = moments, .master = master});
    const TrainResult s2 =
        expect_same_bits({.stage = 2, .accum = 2, .precision = p, .moments = moments, .master = master});
    expect_same_bits({.stage = 3, .accum = 2, .precision = p, .moments = moments, .master = master}, &s2);
    expect_same_bits(
        {.stage = 2, .accum = 2, .optimizer = "nvme", .precision = p, .moments = moments, .master = master}, &s2);
    expect_same_bits(
        {.stage = 2, .accum = 2, .speculative = false, .precision = p, .moments = moments, .master = master}, &s2);
    expect_same_bits({.stage = 3, .accum = 2, .param = "cpu", .precision = p, .moments = moments, .master = master},
                     &s2);
    expect_same_bits({.stage = 3,
                      .accum = 2,
                      .optimizer = "nvme",
                      .param = "nvme",
                      .precision = p,
                      .moments = moments,
                      .master = master},
                     &s2);
    const TrainResult redo =
        expect_same_bits({.stage = 2, .precision = p, .grad_clip = 0.05, .moments = moments, .master = master});
    EXPECT_EQ(redo.speculative_redos, 20);
  }
  // bf16 states on the device too: all of them, half of them (--offload-ratio 0.5), at stage
  // 0 every rank's whole copy of m and v (its master is the model's f32 parameters); the CPU
  // backend's AdamW runs the same kernel, and a bf16 master there is the compute shard.
  for (int stage = 0; stage <= 3; ++stage)
    expect_same_bits({.stage = stage, .accum = 2, .optimizer = "none", .precision = DType::bf16, .moments = "bf16"});
  expect_same_bits({.stage = 2, .accum = 2, .ratio = 0.5, .precision = DType::bf16, .moments = "bf16"});
  for (const auto& [moments, master] : {std::pair{"bf16", "bf16"}, std::pair{"f32", "bf16"}}) {
    const DType p = DType::bf16;
    const TrainResult s2 = expect_same_bits(
        {.stage = 2, .accum = 2, .optimizer = "none", .precision = p, .moments = moments, .master = master});
    expect_same_bits(
        {.stage = 1, .accum = 2, .optimizer = "none", .precision = p, .moments = moments, .master = master});
    expect_same_bits(
        {.stage = 3, .accum = 2, .optimizer = "none", .precision = p, .moments = moments, .master = master}, &s2);
    expect_same_bits({.stage = 2, .accum = 2, .ratio = 0.5, .precision = p, .moments = moments, .master = master}, &s2);
    expect_same_bits({.stage = 3,
                      .accum = 2,
                      .optimizer = "nvme",
                      .ratio = 0.5,
                      .precision = p,
                      .moments = moments,
                      .master = master},
                     &s2);
  }
  // bf16 m and v under f32 compute, and rounding to nearest.
  expect_same_bits({.stage = 2, .moments = "bf16"});
  expect_same_bits({.stage = 3,
                    .optimizer = "nvme",
                    .precision = DType::bf16,
                    .moments = "bf16",
                    .master = "bf16",
                    .rounding = "nearest"});
}

// The most elements of parameters without weight decay any rank owns — the f32 masters kept
// beside a bf16 master, sized for that rank (the plan is every rank's) — and the shard's size.
std::pair<int64_t, int64_t> most_f32_masters(const TrainOptions& o) {
  const std::vector<zero::ParamSpan> table = param_table(ModelSpec::load(o.model)).first;
  const zero::PartitionLayout lay(table, world->size(), o.sub_group_size);
  int64_t most = 0;
  for (int r = 0; r < world->size(); ++r) {
    int64_t n = 0;
    for (const zero::OwnedPiece& p : lay.owned_pieces(r)) n += table[size_t(p.param)].weight_decay ? 0 : p.count;
    most = std::max(most, n);
  }
  return {most, lay.shard_elements()};
}

// The host holds master, m and v in the bytes their dtypes say, and the drive moves each
// once each way per step: 12, 8 and 6 B per element for f32, bf16 m and v, and all bf16.
// (strata plan's bytes for these layouts: Nvme.StepTrafficIsThePlans… below.)
TEST(StateDtype, HostAndNvmeBytesFollowTheStateDtypes) {
  Case c{.stage = 2, .precision = DType::bf16};
  const auto host = [&] { return test::train_on(world, options_for(c, true)).host_bytes; };
  const size_t f = host();
  c.moments = "bf16";
  const size_t h = host();
  c.master = "bf16";
  const size_t b = host();
  EXPECT_GT(h, b);
  // A bf16 master keeps an f32 one beside it for the parameters without weight decay: room
  // for the most any rank owns (the plan is every rank's), in each of the two copies.
  const int64_t kept32 = most_f32_masters(options_for(c, true)).first;
  EXPECT_GT(kept32, 0);
  EXPECT_EQ(f - h, 2 * (h - b) + 2 * 4 * 2 * size_t(kept32))
      << "two copies: 4 B of m and v per element, then 2 B of master, less 4 B per f32 master";
  c = {.stage = 2, .optimizer = "nvme", .speculative = false, .precision = DType::bf16};
  uint64_t n2h[3], h2n[3];
  for (int k = 0; k < 3; ++k) {
    c.moments = k ? "bf16" : "f32", c.master = k == 2 ? "bf16" : "f32";
    const StepTimeline t = test::train_on(world, options_for(c, true)).steps.back().timeline;
    n2h[k] = t.n2h_bytes, h2n[k] = t.h2n_bytes;
  }
  EXPECT_GT(n2h[2], 0u);
  EXPECT_EQ(2 * n2h[0], 3 * n2h[1]) << "12 : 8 B per element";
  EXPECT_EQ(n2h[0], 2 * n2h[2]) << "12 : 6 B per element";
  for (int k = 0; k < 3; ++k) EXPECT_EQ(n2h[k], h2n[k]) << "read once, written once";
}

// On the device, the optimizer holds per element of its shard: 12 B in f32 (master, m, v),
// 8 B with bf16 m and v, 6 B with a bf16 master too — the compute shard, which stages 1-2
// keep anyway and then count as the master — plus 4 B for each f32 master of a parameter
// without weight decay, room for the most any rank owns.
TEST(StateDtype, DeviceBytesFollowTheStateDtypes) {
  Case c{.stage = 2, .optimizer = "none", .precision = DType::bf16};
  const auto optim = [&] { return test::train_on(world, options_for(c, true)).optim_bytes; };
  const size_t f = optim();
  c.moments = "bf16";
  const size_t h = optim();
  c.master = "bf16";
  const size_t b = optim();
  const auto [kept32, shard_elements] = most_f32_masters(options_for(c, true));
  const size_t shard = size_t(shard_elements);
  EXPECT_GT(kept32, 0);
  EXPECT_EQ(f, 12 * shard);
  EXPECT_EQ(h, 8 * shard);
  EXPECT_EQ(b, 6 * shard + 4 * size_t(kept32));
}

// With a bf16 master, the parameters without weight decay (norm gains and biases) keep
// an f32 master. At lr 1e-5 a gain moves by less than half a bf16 step of 1.0 (2^-9 below
// it), which a bf16 master rounded to nearest would lose, leaving it at 1.0; the decayed
// weights' masters stay bf16 values. On the device, in host RAM and on NVMe (where the f32
// masters stay in RAM), speculative and not.
TEST(StateDtype, NormGainsAndBiasesKeepAnF32MasterBesideABf16One) {
  for (const char* tier : {"none", "cpu", "nvme"})
    for (bool speculative : {true, false}) {
      if (std::string(tier) == "none" && !speculative) continue;  // nothing to speculate on
      const Case c{.stage = 2,
                   .optimizer = tier,
                   .speculative = speculative,
                   .precision = DType::bf16,
                   .moments = "bf16",
                   .master = "bf16",
                   .rounding = "nearest"};
      TrainOptions o = options_for(c, true);
      o.lr = 1e-5, o.warmup = 0, o.steps = 6;
      const TrainResult r = test::train_on(world, o);
      int64_t gains_moved = 0, off_grid = 0, decayed_off_grid = 0;
      for (const zero::ParamSpan& q : param_table(ModelSpec::load(o.model)).first)
        for (int64_t i = q.offset; i < q.offset + q.count; ++i) {
          const float x = r.final_params[size_t(i)];
          const bool bf16_value = bf16_to_f32(f32_to_bf16(x)) == x;
          if (q.weight_decay) {
            decayed_off_grid += !bf16_value;
          } else {
            off_grid += !bf16_value;
            gains_moved += x != 1.0f && std::fabs(x - 1.0f) < 1.0f / 512;
          }
        }
      EXPECT_EQ(decayed_off_grid, 0) << c.name();
      EXPECT_GT(gains_moved, 0) << c.name() << ": no gain moved by less than half a bf16 step";
      EXPECT_GT(off_grid, 0) << c.name();
    }
}

WORLD_SIZES(1)
TEST(Offload, BadCombinationsAreRefused) {
  TrainOptions o = options_for({.stage = 0}, true);
  EXPECT_THROW(test::train_on(world, o), Error) << "stage 0 has no partitioned optimizer to offload";
  o = options_for({.stage = 2, .param = "cpu"}, true);
  EXPECT_THROW(test::train_on(world, o), Error) << "parameters are offloaded only at stage 3";
  o = options_for({.stage = 3, .param = "cpu", .ratio = 0.5}, true);
  EXPECT_THROW(test::train_on(world, o), Error) << "parameter offload needs the whole optimizer on the host";
  o = options_for({.stage = 0, .optimizer = "none", .precision = DType::bf16, .master = "bf16"}, true);
  try {
    test::train_on(world, o);
    ADD_FAILURE() << "stage 0's master is the model's f32 parameters";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--zero-stage 1"), std::string::npos) << e.what();
  }
  o = options_for({.stage = 2, .precision = DType::f32, .master = "bf16"}, true);
  EXPECT_THROW(test::train_on(world, o), Error) << "a bf16 master needs bf16 compute";
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::test::run_mpi_tests(argc, argv, strata::world, 120.0); }
