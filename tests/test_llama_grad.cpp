// Every Llama parameter's gradient against central finite differences (tiny model with
// grouped-query attention, f32), with the same tolerance argument as test_gpt2_grad.cpp:
// |g - fd| <= 2e-4 + 2e-2·|fd|, h = 1e-2 on weights of scale ~0.2. Also: the fused ops'
// backward passes each against finite differences of their forward.
#include <cstring>
#include <fstream>
#include <sstream>

#include "cpu/cpu_backend.h"
#include "model/llama.h"
#include "test_util.h"

namespace strata {
namespace {

LlamaConfig tiny_llama(int kv_heads) {
  std::ifstream f(test::source_path("configs/llama-tiny.json"));
  std::stringstream ss;
  ss << f.rdbuf();
  LlamaConfig c = LlamaConfig::from_json_text(ss.str(), "configs/llama-tiny.json");
  c.n_kv_head = kv_heads;
  return c;
}

void check_gradients(const LlamaConfig& cfg, const std::string& what) {
  cpu::CpuBackend be({size_t(1) << 30, 0});
  const int B = 2, T = 8;
  Llama model(be, cfg, B, T, DType::f32);
  NormalRng rng(42, 0);
  std::vector<float> p(size_t(model.num_params()));
  for (int64_t i = 0; i < model.num_params(); ++i) p[size_t(i)] = 0.2f * rng.next();
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const ParamSpec& s = model.param_specs()[k];
    if (s.weight_decay) continue;  // the norms: around 1
    for (int64_t i = 0; i < s.shape.numel(); ++i) p[size_t(model.param_offset(int(k)) + i)] += 1.0f;
  }
  be.upload(model.master_flat().data, p.data(), p.size() * 4);
  test::expect_gradients_match_finite_differences(model, B, T, cfg.vocab_size, cfg.padded_vocab_size, what + ": ");
}

TEST(LlamaGradients, GroupedQueryAttentionMatchesFiniteDifferences) { check_gradients(tiny_llama(2), "GQA 4/2"); }
TEST(LlamaGradients, MultiHeadAttentionMatchesFiniteDifferences) { check_gradients(tiny_llama(4), "MHA 4/4"); }

TEST(LlamaConfig, RefusesWhatItDoesNotCompute) {
  auto msg = [](const std::string& text) {
    try {
      LlamaConfig::from_json_text(text, "t.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string base =
      R"("model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 16,
         "intermediate_size": 24, "vocab_size": 37, "max_position_embeddings": 16)";
  EXPECT_EQ(msg("{" + base + "}"), "(no error)");
  EXPECT_NE(msg("{" + base + R"(, "tie_word_embeddings": true})").find("untied"), std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "attention_bias": true})").find("biases"), std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "rope_scaling": {"type": "linear", "factor": 2}})").find("rope_scaling"),
            std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "num_key_value_heads": 3})").find("multiple"), std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "hidden_sise": 16})").find("unknown key 'hidden_sise'"), std::string::npos);
}

}  // namespace
}  // namespace strata
