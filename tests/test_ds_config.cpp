// DeepSpeed-style configs: the shapes of public DeepSpeed examples map onto Strata's options;
// the batch triple is derived or refused; unknown keys get a suggestion; understood but
// unimplemented keys are refused, never ignored.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cli/ds_config.h"
#include "test_util.h"

namespace strata {
namespace {

using cli::ConfigSetting;
using test::error_of;

std::map<std::string, std::string> options_of(const std::vector<ConfigSetting>& v) {
  std::map<std::string, std::string> m;
  for (const ConfigSetting& s : v) m[s.option] = s.value;
  return m;
}

std::string write_config(const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("strata_ds_" + std::to_string(getpid()) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

TEST(DsConfig, Zero2OffloadFp16Example) {
  const auto v = cli::translate_ds_config(test::source_path("tests/fixtures/ds_configs/zero2_offload_fp16.json"), 1);
  const auto m = options_of(v);
  const std::map<std::string, std::string> want = {{"micro-batch", "4"},
                                                   {"grad-accum", "4"},
                                                   {"grad-clip", "1"},
                                                   {"log-every", "5"},
                                                   {"precision", "f16"},
                                                   {"loss-scale", "0"},
                                                   {"loss-scale-window", "1000"},
                                                   {"initial-scale-power", "16"},
                                                   {"hysteresis", "2"},
                                                   {"min-loss-scale", "1"},
                                                   {"lr", "3e-04"},
                                                   {"beta1", "0.9"},
                                                   {"beta2", "0.999"},
                                                   {"eps", "1e-08"},
                                                   {"weight-decay", "0.01"},
                                                   {"lr-decay", "constant"},
                                                   {"warmup", "10"},
                                                   {"zero-stage", "2"},
                                                   {"offload-optimizer", "cpu"},
                                                   {"allgather-bucket-size", "200000000"},
                                                   {"overlap-comm", "true"},
                                                   {"reduce-bucket-size", "200000000"}};
  EXPECT_EQ(m, want);
  for (const ConfigSetting& s : v) {
    if (s.option == "zero-stage") {
      EXPECT_NE(s.from.find("zero_optimization.stage"), std::string::npos) << s.from;
    }
  }
}

TEST(DsConfig, Zero3NvmeBf16Example) {
  const auto m =
      options_of(cli::translate_ds_config(test::source_path("tests/fixtures/ds_configs/zero3_nvme_bf16.json"), 2));
  EXPECT_EQ(m.at("precision"), "bf16");
  EXPECT_EQ(m.at("lr-decay"), "cosine");
  EXPECT_EQ(m.at("steps"), "6");
  EXPECT_EQ(m.at("min-lr-ratio"), "0.1");
  EXPECT_EQ(m.at("zero-stage"), "3");
  EXPECT_EQ(m.at("prefetch-bucket-size"), "50000");
  EXPECT_EQ(m.at("max-live-params"), "1000000000");
  EXPECT_EQ(m.at("offload-optimizer"), "nvme");
  EXPECT_EQ(m.at("offload-param"), "nvme");
  EXPECT_EQ(m.at("nvme-path"), "NVME_PATH");
  EXPECT_EQ(m.at("pin-buffer-count"), "4");
  EXPECT_EQ(m.at("aio-block-size"), "1048576");
  EXPECT_EQ(m.at("aio-queue-depth"), "8");
  EXPECT_EQ(m.at("host-threads"), "1");  // the old name thread_count
}

TEST(DsConfig, AnyTwoOfTheBatchTripleGiveTheThird) {
  auto m = options_of(
      cli::translate_ds_config(write_config(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})"), 4));
  EXPECT_EQ(m.at("micro-batch"), "4");
  EXPECT_EQ(m.at("grad-accum"), "2");
  m = options_of(
      cli::translate_ds_config(write_config(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2})"), 4));
  EXPECT_EQ(m.at("grad-accum"), "4");
  m = options_of(cli::translate_ds_config(write_config(R"({"train_batch_size": 8})"), 2));
  EXPECT_EQ(m.at("micro-batch"), "4");
  EXPECT_EQ(m.at("grad-accum"), "1");
  std::string msg = error_of([] {
    cli::translate_ds_config(
        write_config(
            R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})"),
        2);
  });
  EXPECT_NE(msg.find("train_batch_size 32 is not train_micro_batch_size_per_gpu × gradient_accumulation_steps × ranks "
                     "= 4 × 2 × 2"),
            std::string::npos)
      << msg;
  msg = error_of([] {
    cli::translate_ds_config(write_config(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})"), 1);
  });
  EXPECT_NE(msg.find("not a multiple"), std::string::npos) << msg;
}

TEST(DsConfig, UnknownKeysSuggestTheNearest) {
  std::string msg =
      error_of([] { cli::translate_ds_config(write_config(R"({"zero_optimisation": {"stage": 2}})"), 1); });
  EXPECT_NE(msg.find("'zero_optimisation' is not a key Strata knows"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'zero_optimization'?"), std::string::npos) << msg;
  msg = error_of(
      [] { cli::translate_ds_config(write_config(R"({"zero_optimization": {"stage3_prefetch_bucket": 5}})"), 1); });
  EXPECT_NE(msg.find("'zero_optimization.stage3_prefetch_bucket' is not a key"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'stage3_prefetch_bucket_size'?"), std::string::npos) << msg;
  msg = error_of([] { cli::translate_ds_config(write_config(R"({"aio": {"thread_cnt": 2}})"), 1); });
  EXPECT_NE(msg.find("did you mean 'thread_count'?"), std::string::npos) << msg;
}

TEST(DsConfig, UnderstoodButUnimplementedIsRefused) {
  struct Case {
    const char* config;
    const char* says;
  } cases[] = {
      {R"({"optimizer": {"type": "Lamb"}})", "'optimizer.type' = \"Lamb\" is not implemented"},
      {R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})",
       "'optimizer.params.adam_w_mode' = false is not implemented"},
      {R"({"scheduler": {"type": "OneCycle"}})", "is not implemented"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5}}})", "DeepSpeed's default \"log\""},
      {R"({"zero_optimization": {"contiguous_gradients": false}})", "contiguous_gradients' = false is not implemented"},
      {R"({"zero_optimization": {"offload_optimizer": {"device": "cpu", "pin_memory": false}}})",
       "pin_memory' = false is not implemented"},
      {R"({"aio": {"use_gds": true}})", "use_gds' = true is not implemented"},
      {R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "both enabled"},
      {R"({"train_micro_batch_size_per_gpu": "auto"})", "is \"auto\""},
      {R"({"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": true}})", "strata export"},
      {R"({"optimizer": {"params": {"lr": 1e-3}}, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 2e-3, "warmup_type": "linear"}}})",
       "both set --lr"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of([&] { cli::translate_ds_config(write_config(c.config), 1); });
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.config << " -> " << msg;
  }
}

TEST(DsConfig, HierarchicalPartitionSize) {
  const auto m = options_of(cli::translate_ds_config(
      write_config(R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}})"), 16));
  EXPECT_EQ(m.at("hpz-partition-size"), "8");
}

TEST(DsConfig, EditDistance) {
  EXPECT_EQ(cli::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(cli::edit_distance("", "abc"), 3u);
  EXPECT_EQ(cli::edit_distance("same", "same"), 0u);
}

}  // namespace
}  // namespace strata
