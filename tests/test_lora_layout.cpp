// Which linear layers LoRA targets, by the module names the Hugging Face models use, and the
// adapters' table: every family's names, fused modules (Phi-3's qkv_proj), all-linear,
// PEFT's defaults, and a target a family lacks named with the ones it has.
#include <gtest/gtest.h>

#include "model/lora.h"
#include "model/model_spec.h"
#include "test_util.h"

namespace strata {
namespace {

ModelSpec spec_of(const std::string& fixture) {
  return ModelSpec::load(test::source_path("tests/fixtures/hf-families/" + fixture + "/config.json"));
}

std::vector<std::string> modules(const std::vector<LoraTarget>& targets, int layer) {
  std::vector<std::string> m;
  for (const LoraTarget& t : targets)
    if (t.layer == layer) m.push_back(t.module);
  return m;
}

TEST(LoraLayout, TargetsAreTheModelsModuleNames) {
  const ModelSpec llama = spec_of("llama2");  // hidden 32, 4 heads, intermediate 48, 2 layers
  LoraConfig lora{8};
  lora.targets = {"all-linear"};
  const auto all = lora_targets(llama, lora);
  EXPECT_EQ(modules(all, 1),
            (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  EXPECT_EQ(all.size(), 14u);
  EXPECT_EQ(all[0].hf_path, "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(all[6].module, "down_proj");
  EXPECT_EQ(all[6].in, 48);
  EXPECT_EQ(all[6].out, 32);
  // PEFT's default for Llama: q and v.
  EXPECT_EQ(modules(lora_targets(llama, LoraConfig{8}), 0), (std::vector<std::string>{"q_proj", "v_proj"}));
  // The table: A [r, in] then B [out, r] per target, in its layer's unit.
  const auto layout = lora_layout(all, 8, false);
  ASSERT_EQ(layout.size(), 28u);
  EXPECT_EQ(layout[0].name, "h0.q_proj.lora_A");
  EXPECT_EQ(layout[0].shape, (Shape{8, 32}));
  EXPECT_EQ(layout[13].name, "h0.down_proj.lora_B");
  EXPECT_EQ(layout[13].shape, (Shape{32, 8}));
  EXPECT_EQ(layout[14].unit, 2);
}

TEST(LoraLayout, FusedModulesAndGpt2sConv1d) {
  LoraConfig lora{4};
  lora.targets = {"all-linear"};
  const auto phi3 = lora_targets(spec_of("phi3"), lora);
  EXPECT_EQ(modules(phi3, 0), (std::vector<std::string>{"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}));
  EXPECT_EQ(phi3[0].specs, 3);  // q, k and v under one module
  const auto gpt2 = lora_targets(spec_of("gpt2"), lora);
  EXPECT_EQ(modules(gpt2, 0), (std::vector<std::string>{"c_attn", "c_proj", "c_fc", "c_proj"}));
  EXPECT_EQ(gpt2[0].out, 3 * gpt2[0].in);
  lora.targets = {"c_proj"};  // both of a layer's c_proj, as PEFT's suffix match takes them
  EXPECT_EQ(lora_targets(spec_of("gpt2"), lora).size(), 2u * 2u);
}

TEST(LoraLayout, AModuleTheFamilyLacksIsNamedWithTheOnesItHas) {
  LoraConfig lora{4};
  lora.targets = {"q_proj", "query_key_value"};
  const std::string msg = test::error_of([&] { lora_targets(spec_of("llama2"), lora); });
  EXPECT_NE(msg.find("has no module 'query_key_value'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
