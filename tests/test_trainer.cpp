// The single-rank trainer: loss falls, runs are deterministic, gradient accumulation
// equals a bigger micro-batch, bf16 tracks f32, and the steady state allocates nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "train/lr_schedule.h"
#include "train/trainer.h"
#include "zero/adamw.h"

namespace strata {
namespace {

TrainOptions small_run(const std::string& name) {
  TrainOptions o;
  o.model = test::source_path("configs/default.json");
  o.data = test::source_path("data/default.txt");
  o.steps = 30;
  o.micro_batch = 4;
  o.seq_len = 64;
  o.warmup = 5;
  o.log_every = 10;
  o.quiet = true;
  o.out = (std::filesystem::temp_directory_path() / ("strata_test_" + name + std::to_string(getpid()))).string();
  return o;
}

TEST(Trainer, LossFallsAndMetricsAreWritten) {
  TrainOptions o = small_run("falls");
  TrainResult r = train(o);
  ASSERT_EQ(r.steps.size(), 30u);
  EXPECT_NEAR(r.steps.front().loss, std::log(256.0), 0.2);  // starts at ~ln(vocab)
  EXPECT_LT(r.steps.back().loss, 3.5);
  EXPECT_EQ(r.steady_state_allocations, 0u) << "allocation inside the training step";
  std::ifstream f(o.out + "/metrics.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line);
    for (const char* k : {"step", "loss", "lr", "tokens_per_s"}) EXPECT_TRUE(j.contains(k)) << k << " in " << line;
    ++lines;
  }
  EXPECT_EQ(lines, 4);  // steps 1, 10, 20, 30
}

TEST(Trainer, DeterministicForASeed) {
  TrainResult a = train(small_run("det_a")), b = train(small_run("det_b"));
  for (size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].loss, b.steps[i].loss) << "step " << i + 1;
}

TEST(Trainer, GradAccumulationEqualsLargerMicroBatch) {
  TrainOptions a = small_run("acc_a"), b = small_run("acc_b");
  a.steps = b.steps = 8;
  a.micro_batch = 4, a.grad_accum = 1;
  b.micro_batch = 2, b.grad_accum = 2;
  TrainResult ra = train(a), rb = train(b);
  for (size_t i = 0; i < ra.steps.size(); ++i) EXPECT_NEAR(ra.steps[i].loss, rb.steps[i].loss, 1e-5) << i + 1;
}

// bf16 compute with f32 master weights stays within 0.1 (≈2% of the initial 5.5) of the
// f32 loss at every step of a 30-step run (measured max 0.003); documented in the README.
// lr 1e-3: at the default 2e-3 this small-batch run hits a loss spike at step 28 in both
// precisions, and where the two recover differently the curves are not comparable.
TEST(Trainer, Bf16LossCurveTracksF32) {
  TrainOptions a = small_run("f32"), b = small_run("bf16");
  a.lr = b.lr = 1e-3;
  b.precision = DType::bf16;
  TrainResult ra = train(a), rb = train(b);
  for (size_t i = 0; i < ra.steps.size(); ++i) EXPECT_NEAR(rb.steps[i].loss, ra.steps[i].loss, 0.1) << i + 1;
}

TEST(Trainer, BadInputIsAClearError) {
  TrainOptions o = small_run("bad");
  o.data = "/nonexistent.txt";
  EXPECT_THROW(train(o), Error);
  o = small_run("bad2");
  o.steps = 0;
  EXPECT_THROW(train(o), Error);
  o = small_run("bad3");
  o.seq_len = 1000;  // beyond n_positions
  EXPECT_THROW(train(o), Error);
  o = small_run("bad4");
  o.device_mem = 1 << 20;
  try {
    train(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos);
  }
}

// The trainer's optimizer is the fused CPU Adam: every ISA gives bit-identical runs.
TEST(Trainer, OptimizerIsTheFusedCpuAdamOnEveryIsa) {
  TrainOptions a = small_run("isa_scalar"), b = small_run("isa_auto");
  a.steps = b.steps = 6;
  a.precision = b.precision = DType::bf16;  // exercises the fused bf16 copy-out too
  a.adam_isa = "scalar";
  TrainResult ra = train(a), rb = train(b);
  for (size_t i = 0; i < ra.steps.size(); ++i) EXPECT_EQ(ra.steps[i].loss, rb.steps[i].loss) << i + 1;
  TrainOptions bad = small_run("isa_bad");
  bad.adam_isa = "sse9";
  EXPECT_THROW(train(bad), Error);
}

TEST(LrSchedule, WarmupThenCosine) {
  LrSchedule s{1.0, 10, 110, 0.1};
  EXPECT_NEAR(s.at(0), 0.1, 1e-12);
  EXPECT_NEAR(s.at(9), 1.0, 1e-12);
  EXPECT_NEAR(s.at(10), 1.0, 1e-12);
  EXPECT_NEAR(s.at(109), 0.1, 1e-12);
  EXPECT_NEAR(s.at(10 + 99 / 2.0), 0.55, 0.01);
}

}  // namespace
}  // namespace strata
