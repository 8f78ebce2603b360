// The option registry (train/option_registry.h) is the one declaration of every `strata
// train` option: its defaults are TrainOptions', its parsers and printers agree, its checks
// are what validate_options runs, the option tables of README.md and docs/ name registered options with
// their registered defaults, and the DeepSpeed key each names maps onto it in --config.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "cli/ds_config.h"
#include "core/error.h"
#include "test_util.h"
#include "train/option_registry.h"

namespace strata {
namespace {

TEST(OptionRegistry, DefaultsAreTrainOptionsAndRoundTrip) {
  std::set<std::string> names;
  for (const TrainOption& d : train_options()) {
    EXPECT_TRUE(names.insert(d.name).second) << "--" << d.name << " is declared twice";
    EXPECT_FALSE(d.help.empty()) << "--" << d.name;
    const TrainOptions defaults;
    // The CLI binds threads to CPUs by default; in-process callers opt in (trainer.h).
    if (d.name != "bind-cpus") {
      EXPECT_EQ(d.get(defaults), d.flag ? "false" : d.default_value) << "--" << d.name;
    }
    TrainOptions t;
    d.set(t, d.flag ? "true" : d.default_value);
    EXPECT_EQ(d.get(t), d.flag ? "true" : d.default_value) << "--" << d.name << " does not print what it parsed";
    EXPECT_NO_THROW(d.check(t)) << "--" << d.name << "'s default is out of its own range";
  }
  EXPECT_NO_THROW(validate_options(TrainOptions{}));
}

TEST(OptionRegistry, ChecksNameTheOption) {
  const auto message = [](const char* name, const char* value) {
    TrainOptions t;
    try {
      find_train_option(name)->set(t, value);
      validate_options(t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("steps", "0").find("--steps: 0 is out of range: must be at least 1"), std::string::npos);
  EXPECT_NE(message("zero-stage", "4").find("--zero-stage: 4 is out of range: must be in [0, 3]"), std::string::npos);
  EXPECT_NE(message("beta2", "1").find("--beta2: 1 is out of range: must be in [0, 1)"), std::string::npos);
  EXPECT_NE(message("lr-decay", "step").find("--lr-decay: 'step' is not one of cosine, linear, constant"),
            std::string::npos);
  EXPECT_NE(message("aio-block-size", "1000").find("--aio-block-size: 1000 is out of range"), std::string::npos);
  EXPECT_NE(message("micro-batch", "3000000000").find("--micro-batch: 3000000000 is out of range"), std::string::npos);
  EXPECT_NE(message("overlap-comm", "yes").find("--overlap-comm: 'yes' is not true or false"), std::string::npos);
  EXPECT_NE(message("precision", "fp8").find("--precision: 'fp8' is not f32, bf16 or f16"), std::string::npos);
  EXPECT_EQ(message("hpz-partition-size", "node"), "no error");
  EXPECT_EQ(message("reduce-bucket-size", "5e8"), "no error");
}

// The pages that document options: README.md and every page under docs/ (the option
// tables live with the task they belong to).
std::vector<std::filesystem::path> option_pages() {
  std::vector<std::filesystem::path> pages{test::source_path("README.md")};
  for (const auto& e : std::filesystem::recursive_directory_iterator(test::source_path("docs")))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  std::sort(pages.begin(), pages.end());
  return pages;
}

// Every row of a table headed "| option | default | meaning |", in the README or a page
// under docs/, names a registered option, and its default is the registered one.
TEST(OptionRegistry, TheDocumentedTablesMatchIt) {
  const std::regex row(R"(^\| `--([a-z0-9-]+)[^`]*` \| ([^|]*) \|)");
  int rows = 0;
  std::set<std::string> documented;
  for (const auto& page : option_pages()) {
    std::ifstream in(page);
    ASSERT_TRUE(in) << page;
    const std::string where = std::filesystem::relative(page, test::source_path("")).string();
    bool in_table = false;
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("| option | default | meaning |")) {
        in_table = true;
        continue;
      }
      if (!line.starts_with("|")) in_table = false;
      std::smatch m;
      if (!in_table || !std::regex_search(line, m, row)) continue;
      ++rows;
      const std::string name = m[1], shown = m[2];
      documented.insert(name);
      const TrainOption* d = find_train_option(name);
      ASSERT_NE(d, nullptr) << where << ": --" << name << " is not a strata train option";
      TrainOptions t;
      const std::string first = shown.substr(0, shown.find(' '));
      if (d->flag) {
        EXPECT_EQ(first, "off") << where << ": --" << name;
        continue;
      }
      if (d->default_value.empty()) {  // no default: the page says what is needed instead
        EXPECT_EQ(shown.front(), '(') << where << ": --" << name << " has no default, but the page shows '" << shown
                                      << "'";
        continue;
      }
      EXPECT_NO_THROW(d->set(t, first)) << where << ": --" << name << " default '" << first << "'";
      EXPECT_EQ(d->get(t), d->default_value) << where << ": --" << name << " default '" << shown << "'";
    }
  }
  EXPECT_GE(rows, 10) << "no option tables found in README.md or docs/";
  // Every option a user can set is documented in one of them.
  for (const TrainOption& o : train_options())
    EXPECT_TRUE(documented.count(o.name)) << "--" << o.name << " is in no option table of docs/";
}

// A config that sets each registered DeepSpeed key (in the shape real configs have) maps
// onto the option that names it.
TEST(OptionRegistry, DeepSpeedKeysMapOntoTheirOptions) {
  const std::map<std::string, std::string> config = {
      {"train_micro_batch_size_per_gpu", R"({"train_micro_batch_size_per_gpu": 4})"},
      {"gradient_accumulation_steps", R"({"gradient_accumulation_steps": 2})"},
      {"optimizer.params.lr", R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}})"},
      {"optimizer.params.betas", R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 0.99]}}})"},
      {"optimizer.params.eps", R"({"optimizer": {"type": "AdamW", "params": {"eps": 1e-6}}})"},
      {"optimizer.params.weight_decay", R"({"optimizer": {"type": "AdamW", "params": {"weight_decay": 0.01}}})"},
      {"scheduler.params.warmup_num_steps",
       R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 5, "warmup_type": "linear"}}})"},
      {"scheduler.params.cos_min_ratio",
       R"({"scheduler": {"type": "WarmupCosineLR", "params": {"cos_min_ratio": 0.1, "warmup_type": "linear"}}})"},
      {"gradient_clipping", R"({"gradient_clipping": 0.5})"},
      {"lora.r", R"({"lora": {"r": 8}})"},
      {"lora.lora_alpha", R"({"lora": {"r": 8, "lora_alpha": 16}})"},
      {"lora.lora_dropout", R"({"lora": {"r": 8, "lora_dropout": 0.05}})"},
      {"lora.target_modules", R"({"lora": {"r": 8, "target_modules": ["q_proj", "v_proj"]}})"},
      {"lora.init_lora_weights", R"({"lora": {"r": 8, "init_lora_weights": "gaussian"}})"},
      {"bf16.enabled", R"({"bf16": {"enabled": true}})"},
      {"fp16.enabled", R"({"fp16": {"enabled": true}})"},
      {"steps_per_print", R"({"steps_per_print": 5})"},
      {"zero_optimization.stage", R"({"zero_optimization": {"stage": 2}})"},
      {"zero_optimization.sub_group_size", R"({"zero_optimization": {"sub_group_size": 1e8}})"},
      {"zero_optimization.reduce_bucket_size", R"({"zero_optimization": {"reduce_bucket_size": 1e7}})"},
      {"zero_optimization.allgather_bucket_size", R"({"zero_optimization": {"allgather_bucket_size": 1e7}})"},
      {"zero_optimization.overlap_comm", R"({"zero_optimization": {"overlap_comm": false}})"},
      {"zero_optimization.stage3_prefetch_bucket_size",
       R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 1e6}})"},
      {"zero_optimization.stage3_param_persistence_threshold",
       R"({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1e4}})"},
      {"zero_optimization.stage3_max_live_parameters",
       R"({"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 1e9}})"},
      {"zero_optimization.zero_hpz_partition_size",
       R"({"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}})"},
      {"fp16.loss_scale", R"({"fp16": {"enabled": true, "loss_scale": 128}})"},
      {"fp16.initial_scale_power", R"({"fp16": {"enabled": true, "initial_scale_power": 12}})"},
      {"fp16.loss_scale_window", R"({"fp16": {"enabled": true, "loss_scale_window": 100}})"},
      {"fp16.hysteresis", R"({"fp16": {"enabled": true, "hysteresis": 3}})"},
      {"fp16.min_loss_scale", R"({"fp16": {"enabled": true, "min_loss_scale": 0.5}})"},
      {"zero_optimization.offload_optimizer.device",
       R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})"},
      {"zero_optimization.offload_param.device",
       R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}})"},
      {"zero_optimization.offload_optimizer.nvme_path",
       R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme", "nvme_path": "/local"}}})"},
      {"zero_optimization.offload_optimizer.ratio",
       R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})"},
      {"zero_optimization.offload_optimizer.buffer_count",
       R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "buffer_count": 8}}})"},
      {"zero_optimization.offload_optimizer.buffer_size",
       R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "buffer_size": 1e8}}})"},
      {"scheduler.params.warmup_type",
       R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10, "warmup_type": "log"}}})"},
      {"optimizer.params.bias_correction", R"({"optimizer": {"type": "Adam", "params": {"bias_correction": false}}})"},
      {"aio.queue_depth", R"({"aio": {"queue_depth": 16}})"},
      {"aio.block_size", R"({"aio": {"block_size": 1048576}})"},
      {"aio.thread_count", R"({"aio": {"thread_count": 2}})"},
      {"activation_checkpointing", R"({"activation_checkpointing": {}})"},
      {"activation_checkpointing.cpu_checkpointing", R"({"activation_checkpointing": {"cpu_checkpointing": true}})"},
      {"bf16.bf16_master_weights_and_grads", R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true}})"},
      {"bf16.bf16_optimizer_states",
       R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true, "bf16_optimizer_states": true}})"},
  };
  std::set<std::string> keys;
  for (const TrainOption& d : train_options()) {
    std::string list = d.deepspeed;
    for (size_t at = 0; !list.empty() && at != std::string::npos;) {
      const size_t comma = list.find(", ", at);
      const std::string key = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      at = comma == std::string::npos ? comma : comma + 2;
      keys.insert(key);
      const auto it = config.find(key);
      ASSERT_NE(it, config.end()) << "--" << d.name << ": give this test a config with " << key;
      std::vector<cli::ConfigSetting> got;
      ASSERT_NO_THROW(got = cli::translate_ds_config_text(it->second, "test.json", 1)) << key;
      bool mapped = false;
      for (const cli::ConfigSetting& s : got) mapped |= s.option == d.name && !s.deepspeed_default;
      EXPECT_TRUE(mapped) << key << " does not map onto --" << d.name;
    }
  }
  EXPECT_EQ(keys.size(), config.size()) << "a config above names a key no option declares";
}

}  // namespace
}  // namespace strata
