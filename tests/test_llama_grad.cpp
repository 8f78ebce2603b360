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
  float* p = model.master_flat().as<float>();
  for (int64_t i = 0; i < model.num_params(); ++i) p[i] = 0.2f * rng.next();
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const ParamSpec& s = model.param_specs()[k];
    if (s.weight_decay) continue;  // the norms: around 1
    for (int64_t i = 0; i < s.shape.numel(); ++i) p[model.param_offset(int(k)) + i] += 1.0f;
  }
  auto tokens = test::random_tokens(size_t(B * T), cfg.vocab_size, 1);
  auto targets = test::random_tokens(size_t(B * T), cfg.vocab_size, 2);
  targets[3] = -1;
  model.zero_grad();
  model.forward(tokens);
  const double loss0 = test::reference_loss(model.logits().as<float>(), targets, cfg.vocab_size, cfg.padded_vocab_size);
  const double loss_bw = model.backward(targets, 1.0f);
  EXPECT_NEAR(loss_bw, loss0, 1e-5 * loss0);
  std::vector<float> grad(model.grad_flat().as<float>(), model.grad_flat().as<float>() + model.num_params());
  auto loss_at = [&]() {
    model.forward(tokens);
    return test::reference_loss(model.logits().as<float>(), targets, cfg.vocab_size, cfg.padded_vocab_size);
  };
  const float h = 1e-2f;
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const auto& spec = model.param_specs()[k];
    const int64_t off = model.param_offset(int(k)), n = spec.shape.numel();
    std::vector<float> fd(static_cast<size_t>(n)), an(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float& w = p[off + i];
      const float saved = w;
      w = saved + h;
      const double up = loss_at();
      w = saved - h;
      const double down = loss_at();
      w = saved;
      fd[size_t(i)] = float((up - down) / (2.0 * double(h)));
      an[size_t(i)] = grad[size_t(off + i)];
    }
    // Padded vocabulary rows of the embedding and head have zero gradient both ways.
    test::expect_close(an.data(), fd.data(), size_t(n), 2e-4, 2e-2, what + ": gradient of " + spec.name);
  }
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
