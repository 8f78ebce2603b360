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
#include "train/lr_schedule.h"

namespace strata {
namespace {

using cli::ConfigSetting;
using test::error_of;

// What the file itself sets (without DeepSpeed's defaults for what it leaves out).
std::map<std::string, std::string> options_of(const std::vector<ConfigSetting>& v) {
  std::map<std::string, std::string> m;
  for (const ConfigSetting& s : v)
    if (!s.deepspeed_default) m[s.option] = s.value;
  return m;
}
std::map<std::string, std::string> defaults_of(const std::vector<ConfigSetting>& v) {
  std::map<std::string, std::string> m;
  for (const ConfigSetting& s : v)
    if (s.deepspeed_default) m[s.option] = s.value;
  return m;
}
bool mentions(const std::vector<std::string>& notes, const std::string& text) {
  for (const std::string& n : notes)
    if (n.find(text) != std::string::npos) return true;
  return false;
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
                                                   {"warmup-type", "linear"},
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
      {R"({"aio": {"use_gds": true}})", "use_gds' = true is not implemented"},
      {R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "both enabled"},
      {R"({"optimizer": {"params": {"lr": 1e-3}}, "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 2e-3, "warmup_type": "linear"}}})",
       "both set --lr"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of([&] { cli::translate_ds_config(write_config(c.config), 1); });
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.config << " -> " << msg;
  }
}

// The shape of the HF Trainer's and LLaMA-Factory's ZeRO-3 configs: "auto" nearly everywhere.
// Each auto is filled as the Trainer fills it: from the run's own options (so the config sets
// nothing there) or, for the bucket sizes, from the model's hidden size.
TEST(DsConfig, HuggingFaceAutoValuesAreFilledAsTheTrainerFillsThem) {
  const std::string cfg = R"({
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": "auto", "warmup_max_lr": "auto",
                                                 "warmup_num_steps": "auto"}},
    "zero_optimization": {"stage": 3, "overlap_comm": true, "contiguous_gradients": true, "sub_group_size": 1e9,
                          "reduce_bucket_size": "auto", "stage3_prefetch_bucket_size": "auto",
                          "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                          "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": false})";
  std::vector<std::string> notes;
  const auto v = cli::translate_ds_config(write_config(cfg), 2, 768, &notes);
  const auto m = options_of(v);
  EXPECT_EQ(m.at("reduce-bucket-size"), "589824");    // hidden²
  EXPECT_EQ(m.at("prefetch-bucket-size"), "530841");  // 0.9·hidden²
  EXPECT_EQ(m.at("param-persistence-threshold"), "7680");
  EXPECT_EQ(m.at("zero-stage"), "3");
  for (const char* o : {"micro-batch", "grad-accum", "lr", "beta1", "beta2", "eps", "weight-decay", "grad-clip",
                        "warmup", "precision"}) {
    EXPECT_EQ(m.count(o), 0u) << "--" << o << " is the run's own (auto), not the file's";
    EXPECT_EQ(defaults_of(v).count(o), 0u) << "--" << o << ": no DeepSpeed default replaces an auto";
  }
  EXPECT_EQ(defaults_of(v).at("warmup-type"), "log");  // WarmupLR's default warmup_type
  EXPECT_TRUE(mentions(notes, "optimizer.params.lr = \"auto\" → --lr")) << notes.size();
  EXPECT_TRUE(mentions(notes, "train_batch_size = \"auto\" → --micro-batch × --grad-accum × ranks"));
  EXPECT_TRUE(mentions(notes, "stage3_gather_16bit_weights_on_model_save = true: "));
  // Without the model's size the bucket sizes keep Strata's values, and the notes say so.
  notes.clear();
  EXPECT_EQ(options_of(cli::translate_ds_config(write_config(cfg), 2, 0, &notes)).count("reduce-bucket-size"), 0u);
  EXPECT_TRUE(mentions(notes, "hidden size is unknown"));
}

// What a file leaves out means DeepSpeed's default, not Strata's: no scheduler is a constant
// lr, no clipping, f32, stage 0; with no optimizer block the HF Trainer's AdamW defaults.
TEST(DsConfig, AbsentKeysTakeDeepSpeedsDefaults) {
  auto d = defaults_of(cli::translate_ds_config(write_config(R"({"train_micro_batch_size_per_gpu": 2})"), 1));
  const std::map<std::string, std::string> want = {
      {"lr", "5e-05"}, {"beta1", "0.9"},         {"beta2", "0.999"}, {"eps", "1e-08"},     {"weight-decay", "0"},
      {"warmup", "0"}, {"lr-decay", "constant"}, {"grad-clip", "0"}, {"precision", "f32"}, {"zero-stage", "0"}};
  EXPECT_EQ(d, want);
  d = defaults_of(cli::translate_ds_config(
      write_config(R"({"optimizer": {"type": "Adam", "params": {"lr": 1e-4}}, "fp16": {"enabled": true},
                      "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 100}}})"),
      1));
  EXPECT_EQ(d.count("lr"), 0u);
  EXPECT_EQ(d.at("beta2"), "0.999");  // DeepSpeed's Adam
  EXPECT_EQ(d.at("weight-decay"), "0");
  EXPECT_EQ(d.at("warmup"), "1000");  // lr_schedules.py's warmup_num_steps
  EXPECT_EQ(d.at("warmup-type"), "log");
  EXPECT_EQ(d.at("hysteresis"), "2");
  EXPECT_EQ(d.count("precision"), 0u);  // the file enabled fp16
}

// DeepSpeed's other names and old forms, and keys that concern only speed or DeepSpeed's
// internals: accepted, each with a line --print-config prints.
TEST(DsConfig, AliasesAndAcceptedKeys) {
  std::vector<std::string> notes;
  const auto m = options_of(cli::translate_ds_config(
      write_config(R"({"_comment": "from a repo", "bfloat16": {"enabled": true}, "prescale_gradients": true,
                      "zero_force_ds_cpu_optimizer": false,
                      "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": true}},
                      "zero_optimization": {"stage": 3, "max_live_parameters": 1e8, "max_reuse_distance": 1e8,
                                            "stage3_gather_fp16_weights_on_model_save": true, "sub_group_size": 0,
                                            "round_robin_gradients": true}})"),
      1, 0, &notes));
  EXPECT_EQ(m.at("precision"), "bf16");
  EXPECT_EQ(m.at("max-live-params"), "100000000");
  EXPECT_EQ(options_of(cli::translate_ds_config(
                           write_config(R"({"optimizer": {"type": "Adam", "params": {"bias_correction": false}}})"), 1))
                .at("adam-bias-correction"),
            "false");
  EXPECT_EQ(m.count("sub-group-size"), 0u);
  for (const char* k : {"_comment", "prescale_gradients = true", "torch_adam = true", "max_reuse_distance",
                        "stage3_gather_fp16_weights_on_model_save", "sub_group_size", "round_robin_gradients"})
    EXPECT_TRUE(mentions(notes, k)) << k;
  EXPECT_EQ(options_of(cli::translate_ds_config(write_config(R"({"zero_optimization": true})"), 1)).at("zero-stage"),
            "1");
  // Monitors, casts and DeepSpeed's ways of moving data change nothing in the result.
  notes.clear();
  const auto q = options_of(cli::translate_ds_config(
      write_config(R"({"fp16": {"enabled": true, "auto_cast": true}, "tensorboard": {"enabled": true},
                      "flops_profiler": {"enabled": true}, "activation_checkpointing": {"partition_activations": true},
                      "zero_optimization": {"stage": 2, "reduce_scatter": false, "contiguous_gradients": false,
                                            "offload_param": {"device": "cpu"}}})"),
      1, 0, &notes));
  EXPECT_EQ(q.count("offload-param"), 0u);  // DeepSpeed ignores it below stage 3
  // Stage 3 with parameters offloaded and the optimizer not: Strata moves the optimizer too.
  std::vector<std::string> notes3;
  const auto z3 = options_of(
      cli::translate_ds_config(write_config(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                            "offload_optimizer": {"device": "none"}, "reduce_bucket_size": 0}})"),
                               1, 0, &notes3));
  EXPECT_EQ(z3.at("offload-param"), "cpu");
  EXPECT_EQ(z3.at("offload-optimizer"), "cpu");
  EXPECT_EQ(z3.count("reduce-bucket-size"), 0u);
  for (const char* k : {"offloads the optimizer with", "one parameter per bucket"})
    EXPECT_TRUE(mentions(notes3, k)) << k;
  for (const char* k : {"auto_cast = true", "tensorboard", "flops_profiler", "partition_activations = true",
                        "reduce_scatter = false", "contiguous_gradients = false", "ignored below stage 3"})
    EXPECT_TRUE(mentions(notes, k)) << k;
  EXPECT_EQ(options_of(cli::translate_ds_config(
                           write_config(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})"), 1))
                .at("offload-optimizer"),
            "cpu");
}

// DeepSpeed's WarmupLR/WarmupDecayLR default warmup_type "log", step for step: lr 0 at the
// first two steps (DeepSpeed sets warmup_min_lr before its first update), then
// lr·ln(s)/ln(warmup), reaching lr at step `warmup`.
// DeepSpeed's 16-bit optimizer states (bf16 block, 2026-05) set Strata's state dtypes; the
// states alone, without the bf16 master DeepSpeed requires with them, are refused.
TEST(DsConfig, Bf16MasterWeightsAndOptimizerStates) {
  const auto m = options_of(cli::translate_ds_config(
      write_config(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true},
                      "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})"),
      1));
  EXPECT_EQ(m.at("precision"), "bf16");
  EXPECT_EQ(m.at("master-dtype"), "bf16");
  EXPECT_EQ(m.at("optimizer-state-dtype"), "bf16");
  const auto master_only = options_of(
      cli::translate_ds_config(write_config(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
                               "bf16_optimizer_states": false}})"),
                               1));
  EXPECT_EQ(master_only.at("master-dtype"), "bf16");
  EXPECT_EQ(master_only.count("optimizer-state-dtype"), 0u);
  const std::string msg = error_of([&] {
    cli::translate_ds_config(write_config(R"({"bf16": {"enabled": true, "bf16_optimizer_states": true}})"), 1);
  });
  EXPECT_NE(msg.find("bf16_optimizer_states without bf16_master_weights_and_grads"), std::string::npos) << msg;
}

TEST(DsConfig, LogWarmupIsDeepSpeeds) {
  LrSchedule s{1e-3, 10, 100, 0.0, LrSchedule::Decay::constant};
  s.warmup_type = LrSchedule::Warmup::log;
  EXPECT_EQ(s.at(0), 0.0);
  EXPECT_EQ(s.at(1), 0.0);
  EXPECT_DOUBLE_EQ(s.at(2), 1e-3 * std::log(2.0) / std::log(10.0));
  EXPECT_DOUBLE_EQ(s.at(5), 1e-3 * std::log(5.0) / std::log(10.0));
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(50), 1e-3);
  const auto m = options_of(cli::translate_ds_config(
      write_config(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_type": "log"}}})"),
      1));
  EXPECT_EQ(m.at("warmup-type"), "log");
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
