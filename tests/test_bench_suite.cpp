// strata bench suite's parts that need no runs: the suite file's expansion and errors, the
// FLOP formula behind its TFLOP/s, and the model's device footprint the planner uses.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bench/suite_spec.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "model/model_factory.h"
#include "model/model_spec.h"
#include "test_util.h"

namespace strata {
namespace {

std::string write_suite(const std::string& text) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("strata_suite_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path) << text;
  return path;
}

TEST(BenchSuite, ExpandsEveryCombinationZeroHasAMeaningFor) {
  const bench::SuiteSpec s = bench::load_suite(test::source_path("tests/fixtures/bench/suite-tiny.json"), "quick");
  // paper: 1; tiny: 2 models × 2 stages × 2 offloads × 2 rank counts.
  ASSERT_EQ(s.runs.size(), 17u);
  EXPECT_EQ(s.runs[0].model, "gpt-170b");
  EXPECT_EQ(s.runs[1].reduce_bucket_size, 65536);
  EXPECT_TRUE(s.scaling.enabled);
  EXPECT_EQ(s.scaling.ranks, (std::vector<int>{1, 2}));
  // Stage 0 has no offload and +param needs stage 3: such rows are left out, as strata plan does.
  const bench::SuiteSpec t =
      bench::load_suite(write_suite(R"({"quick": {"sweeps": [{"name": "x", "models": ["m"], "stages": [0, 2, 3],
                  "offload": ["none", "cpu", "cpu+param"]}]}})"),
                        "quick");
  EXPECT_EQ(t.runs.size(), 1u + 2u + 3u);
  EXPECT_FALSE(t.scaling.enabled);
}

TEST(BenchSuite, BadFilesAreErrorsNamingTheKey) {
  auto error_of = [](const std::string& text) {
    try {
      bench::load_suite(write_suite(text), "quick");
    } catch (const Error& e) {
      return e.what_failed();
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of(R"({"quick": {"sweeps": [{"name": "a", "models": ["m"], "stagse": [1]}]}})").find("'stagse'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quick": {"sweeps": [{"name": "a", "models": ["m"], "offload": ["gpu"]}]}})").find("gpu"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quick": {"sweeps": [{"name": "a", "models": ["m"], "ranks": [0]}]}})").find("ranks"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"quick": {"sweeps": [{"name": "a", "models": "m"}]}})").find("wrong type"), std::string::npos);
  EXPECT_NE(error_of(R"({"quick": {"scaling": {"precision": "fp8"}}})").find("precision 'fp8'"), std::string::npos);
  EXPECT_NE(error_of(R"({"full": {}})").find("no 'quick'"), std::string::npos);
  EXPECT_NE(error_of("{").find("invalid JSON"), std::string::npos);
}

TEST(BenchSuite, FlopsPerTokenCountMatmulsAttentionAndRecomputation) {
  ModelSpec g;
  g.gpt2 = GPT2Config::load(test::source_path("configs/gpt2-small.json"));
  const double L = 12, C = 768, V = 50257, T = 1024;
  const double N = 12 * L * C * C + V * C;  // every matmul weight; the tied head once
  EXPECT_DOUBLE_EQ(g.matmul_params(), N);
  EXPECT_DOUBLE_EQ(g.training_flops_per_token(1024, false), 6 * N + 12 * L * T * C);
  EXPECT_DOUBLE_EQ(g.training_flops_per_token(1024, true), 8 * N + 16 * L * T * C);  // one more forward
  const ModelSpec l = ModelSpec::load(test::source_path("configs/llama-tiny.json"));
  const double c = l.llama.n_embd, kv = double(l.llama.n_kv_head) * l.llama.head_dim(), I = l.llama.intermediate;
  EXPECT_DOUBLE_EQ(l.matmul_params(),
                   l.llama.n_layer * (2 * c * c + 2 * c * kv + 3 * c * I) + double(l.llama.vocab_size) * c);
}

TEST(BenchSuite, ModelDeviceBytesIsWhatTheModelAllocates) {
  for (const char* cfg : {"configs/gpt2-tiny.json", "configs/llama-tiny.json"})
    for (DType dt : {DType::f32, DType::bf16})
      for (bool ckpt : {false, true}) {
        const ModelSpec spec = ModelSpec::load(test::source_path(cfg));
        cpu::CpuBackend be({size_t(1) << 30, 1});
        const ModelStorage storage{true, true, true, ckpt, nullptr};  // its own grads too
        const size_t before = be.budget().used();
        auto m = make_model(spec, be, 2, 8, dt, storage);  // make_model checks it too
        EXPECT_EQ(be.budget().used() - before, model_device_bytes(spec, 2, 8, dt, storage)) << cfg;
      }
}

}  // namespace
}  // namespace strata
