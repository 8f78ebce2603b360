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

void check_gradients(const LlamaConfig& cfg, const std::string& what, float h = 1e-2f) {
  cpu::CpuBackend be({size_t(1) << 30, 0});
  const int B = 2, T = 8;
  Llama model(be, cfg, B, T, DType::f32);
  NormalRng rng(42, 0);
  std::vector<float> p(size_t(model.num_params()));
  for (int64_t i = 0; i < model.num_params(); ++i) p[size_t(i)] = 0.2f * rng.next();
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const ParamSpec& s = model.param_specs()[k];
    const LlamaParam kind = llama_kind(s);
    if (s.weight_decay || kind == LlamaParam::bq || kind == LlamaParam::bk || kind == LlamaParam::bv ||
        kind == LlamaParam::bo)
      continue;  // the norms: around 1
    for (int64_t i = 0; i < s.shape.numel(); ++i) p[size_t(model.param_offset(int(k)) + i)] += 1.0f;
  }
  be.upload(model.master_flat().data, p.data(), p.size() * 4);
  test::expect_gradients_match_finite_differences(model, B, T, cfg.vocab_size, cfg.padded_vocab_size, what + ": ", h);
}

TEST(LlamaGradients, GroupedQueryAttentionMatchesFiniteDifferences) { check_gradients(tiny_llama(2), "GQA 4/2"); }
TEST(LlamaGradients, MultiHeadAttentionMatchesFiniteDifferences) { check_gradients(tiny_llama(4), "MHA 4/4"); }

// The later families' options, each through the whole backward: tied embeddings with
// llama3 rope scaling (Llama 3.2), q/k/v biases (Qwen2), per-head q/k norms with a head_dim
// that is not hidden/heads and all four biases (Qwen3 with attention_bias). The q/k norms
// and the twice-used embedding curve the loss more: h = 3e-3 keeps the truncation error
// (∝ h²) inside the tolerance, and the f32 rounding (∝ 1/h) still far below it.
TEST(LlamaGradients, FamiliesMatchFiniteDifferences) {
  LlamaConfig l32 = tiny_llama(2);
  l32.tied = true;
  l32.rope.scaling = RopeScaling::llama3, l32.rope.factor = 8, l32.rope.original_max_position = 4;
  check_gradients(l32, "tied + llama3 rope", 3e-3f);
  LlamaConfig qwen2 = tiny_llama(2);
  qwen2.family = "qwen2", qwen2.qkv_bias = true, qwen2.tied = true;
  check_gradients(qwen2, "qwen2 qkv bias", 3e-3f);
  LlamaConfig qwen3 = tiny_llama(2);
  qwen3.family = "qwen3", qwen3.qk_norm = true, qwen3.head_dim_key = 6, qwen3.qkv_bias = qwen3.o_bias = true;
  ASSERT_NE(qwen3.q_dim(), qwen3.n_embd);
  check_gradients(qwen3, "qwen3 q/k norm, head_dim 6, biases", 3e-3f);
}

// The layer steps of the later families, through the whole backward: norms after each
// sublayer and q/k norms over the whole projections (OLMo-2); Gemma's norms before and after
// with their 1 + w, GeGLU, the scaled embedding, its own score scale and soft-cap, per-head
// q/k norms, and sliding layers with their own RoPE; partial rotary embeddings (Phi-3). (The
// final soft-cap of the logits is held to its formulas in CrossEntropy.SoftCappedLogits, and
// with the model to transformers in cli.hf_families.)
TEST(LlamaGradients, LayerStepsOfTheLaterFamiliesMatchFiniteDifferences) {
  LlamaConfig olmo2 = tiny_llama(2);
  olmo2.norms = NormPlacement::post, olmo2.qk_norm = olmo2.qk_norm_whole = true;
  check_gradients(olmo2, "post-norms, whole q/k norms", 3e-3f);
  LlamaConfig gemma = tiny_llama(2);
  gemma.norms = NormPlacement::sandwich, gemma.norm_offset = 1.0f, gemma.mlp_act = GatedAct::gelu_tanh;
  gemma.embed_scale = true, gemma.query_scale = 0.3f, gemma.attn_softcap = 2.0f;
  gemma.qk_norm = true;
  gemma.tied = true, gemma.sliding_window = 3, gemma.sliding_layers = {true, false};
  gemma.local_rope_own = true, gemma.local_rope.theta = 100.0f;
  // (The embedding, scaled by sqrt(16) and tied, curves the loss most: h = 1e-3.)
  check_gradients(gemma, "sandwich norms (1 + w), GeGLU, scaled embedding, capped scores, sliding layers", 1e-3f);
  LlamaConfig phi3 = tiny_llama(2);
  phi3.rope.rotary_dim = 2;  // of head_dim 4
  check_gradients(phi3, "partial rotary", 3e-3f);
}

TEST(LlamaConfig, ReadsTheFamiliesKeys) {
  const LlamaConfig c = LlamaConfig::from_json_text(
      R"({"model_type": "qwen3", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "hidden_size": 16, "head_dim": 8, "intermediate_size": 24, "vocab_size": 37, "max_position_embeddings": 64,
          "tie_word_embeddings": true, "attention_bias": false, "use_sliding_window": false, "sliding_window": 8,
          "max_window_layers": 2, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}})",
      "q.json");
  EXPECT_EQ(c.family, "qwen3");
  EXPECT_TRUE(c.qk_norm && c.tied && !c.qkv_bias && !c.o_bias);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.q_dim(), 32);
  EXPECT_EQ(c.sliding_window, 0);  // use_sliding_window false: not in force
  EXPECT_EQ(c.rope.scaling, RopeScaling::llama3);
  EXPECT_EQ(c.rope.original_max_position, 32);
  const LlamaConfig q2 = LlamaConfig::from_json_text(
      R"({"model_type": "qwen2", "num_hidden_layers": 1, "num_attention_heads": 4, "hidden_size": 16,
          "intermediate_size": 24, "vocab_size": 37, "max_position_embeddings": 64})",
      "q2.json");
  EXPECT_TRUE(q2.qkv_bias && !q2.o_bias && !q2.qk_norm);
  const LlamaConfig m = LlamaConfig::from_json_text(
      R"({"model_type": "mistral", "num_hidden_layers": 1, "num_attention_heads": 4, "hidden_size": 16,
          "intermediate_size": 24, "vocab_size": 37, "max_position_embeddings": 64, "sliding_window": 16})",
      "m.json");
  EXPECT_EQ(m.sliding_window, 16);
  EXPECT_EQ(m.layer_window(0), 16);  // Mistral: every layer
  // Qwen with use_sliding_window slides the layers from max_window_layers up, as
  // transformers does; layer_types, where given, names them.
  const std::string qwen = R"({"model_type": "qwen2", "num_hidden_layers": 3, "num_attention_heads": 4,
      "hidden_size": 16, "intermediate_size": 24, "vocab_size": 37, "max_position_embeddings": 64,
      "sliding_window": 8, "use_sliding_window": true)";
  const LlamaConfig q = LlamaConfig::from_json_text(qwen + R"(, "max_window_layers": 1})", "q.json");
  EXPECT_EQ(q.layer_window(0), 0);
  EXPECT_EQ(q.layer_window(1), 8);
  EXPECT_EQ(q.layer_window(2), 8);
  const LlamaConfig typed = LlamaConfig::from_json_text(
      qwen + R"(, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})", "t.json");
  EXPECT_EQ(typed.layer_window(0), 8);
  EXPECT_EQ(typed.layer_window(1), 0);
  EXPECT_EQ(typed.layer_window(2), 8);
  EXPECT_THROW(LlamaConfig::from_json_text(qwen + R"(, "layer_types": ["full_attention"]})", "short.json"), Error);
  EXPECT_THROW(LlamaConfig::from_json_text(qwen + R"(, "layer_types": ["chunked_attention", "a", "b"]})", "x.json"),
               Error);
}

// transformers 5 writes rope_theta and rope_scaling as one rope_parameters object (keyed by
// layer type in some models), dtype for torch_dtype, and layer_types: the same model as
// transformers 4's keys.
TEST(LlamaConfig, ReadsTransformers5KeysAsTransformers4Ones) {
  const std::string shape =
      R"("model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "hidden_size": 16, "intermediate_size": 24, "vocab_size": 37, "max_position_embeddings": 64)";
  const std::string llama3 =
      R"("factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 32)";
  const LlamaConfig v4 = LlamaConfig::from_json_text(
      "{" + shape + R"(, "torch_dtype": "float32", "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", )" +
          llama3 + "}}",
      "v4.json");
  const LlamaConfig v5 = LlamaConfig::from_json_text(
      "{" + shape + R"(, "dtype": "float32", "layer_types": ["full_attention", "full_attention"],
          "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", )" +
          llama3 + "}}",
      "v5.json");
  const LlamaConfig by_layer = LlamaConfig::from_json_text(
      "{" + shape + R"(, "rope_parameters": {"full_attention": {"rope_theta": 500000.0, "rope_type": "llama3", )" +
          llama3 + "}}}",
      "by_layer.json");
  for (const LlamaConfig* c : {&v5, &by_layer}) {
    EXPECT_EQ(c->rope.theta, 500000.0f);
    EXPECT_EQ(c->rope.scaling, RopeScaling::llama3);
    EXPECT_EQ(c->rope.factor, v4.rope.factor);
    EXPECT_EQ(c->rope.low_freq_factor, v4.rope.low_freq_factor);
    EXPECT_EQ(c->rope.high_freq_factor, v4.rope.high_freq_factor);
    EXPECT_EQ(c->rope.original_max_position, v4.rope.original_max_position);
    EXPECT_EQ(c->sliding_window, 0);
  }
  const LlamaConfig plain = LlamaConfig::from_json_text(
      "{" + shape + R"(, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}})", "plain.json");
  EXPECT_EQ(plain.rope.theta, 10000.0f);
  EXPECT_EQ(plain.rope.scaling, RopeScaling::none);
  auto msg = [&](const std::string& rope) {
    try {
      LlamaConfig::from_json_text("{" + shape + R"(, "rope_parameters": )" + rope + "}", "t.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(msg(R"({"rope_theta": 1e4, "rope_type": "yarn", "factor": 4.0})").find("linear or llama3"),
            std::string::npos);
  EXPECT_EQ(msg(R"({"rope_theta": 1e4, "rope_type": "default", "factor": 1.0})"), "(no error)");
  EXPECT_NE(msg(R"({"rope_theta": 1e4, "rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0})")
                .find("'low_freq_factor'"),
            std::string::npos);
  EXPECT_NE(msg(R"({"full_attention": {"rope_theta": 1e6, "rope_type": "default"},
                    "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}})")
                .find("differ by layer type"),
            std::string::npos);
}

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
  EXPECT_EQ(msg("{" + base + R"(, "tie_word_embeddings": true, "attention_bias": true})"), "(no error)");
  EXPECT_EQ(msg("{" + base + R"(, "rope_scaling": {"type": "linear", "factor": 2}})"), "(no error)");
  EXPECT_NE(msg("{" + base + R"(, "rope_scaling": {"type": "dynamic", "factor": 2}})").find("linear or llama3"),
            std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8}})").find("low_freq_factor"),
            std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "mlp_bias": true})").find("mlp_bias"), std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "attention_dropout": 0.1})").find("attention_dropout"), std::string::npos);
  std::string gemma = base;
  gemma.replace(gemma.find("llama"), 5, "gemma");
  EXPECT_NE(msg("{" + gemma + "}").find("gemma"), std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "num_key_value_heads": 3})").find("multiple"), std::string::npos);
  EXPECT_NE(msg("{" + base + R"(, "hidden_sise": 16})").find("unknown key 'hidden_sise'"), std::string::npos);
}

}  // namespace
}  // namespace strata
