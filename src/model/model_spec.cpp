#include "model/model_spec.h"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace strata {

ModelSpec ModelSpec::load(const std::string& path) {
  const std::string file = std::filesystem::is_directory(path) ? path + "/config.json" : path;
  std::ifstream f(file);
  STRATA_CHECK(f.good(), "cannot open model config '" + file + "'",
               "pass --model with a JSON file such as configs/default.json, a Hugging Face model directory, or a named "
               "size from configs/bench such as gpt-1.5b");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), file);
}

ModelSpec ModelSpec::from_json_text(const std::string& text, const std::string& origin) {
  ModelSpec s;
  s.arch = model_arch_of(text, origin);
  if (s.arch == "llama")
    s.llama = LlamaConfig::from_json_text(text, origin);
  else
    s.gpt2 = GPT2Config::from_json_text(text, origin);
  return s;
}

double ModelSpec::matmul_params() const {
  const double C = n_embd(), L = n_layer(), V = vocab_size();
  if (arch == "llama") {
    const double kv = double(llama.n_kv_head) * llama.head_dim(), I = llama.intermediate;
    return L * (2 * C * C + 2 * C * kv + 3 * C * I) + V * C;  // q, o; k, v; gate, up, down; head
  }
  return L * 12 * C * C + V * C;  // qkv 3C², proj C², fc 4C², proj 4C²; the tied head
}

double ModelSpec::training_flops_per_token(int seq_len, bool recompute) const {
  const double forward = 2 * matmul_params() + 4.0 * n_layer() * double(seq_len) * n_embd();
  return (recompute ? 4 : 3) * forward;
}

std::string ModelSpec::shape_json() const {
  nlohmann::ordered_json j;
  if (arch == "llama") {
    const LlamaConfig& c = llama;
    j = {{"arch", "llama"},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_kv_head},
         {"hidden_size", c.n_embd},
         {"intermediate_size", c.intermediate},
         {"vocab_size", c.vocab_size},
         {"padded_vocab_size", c.padded_vocab_size},
         {"max_position_embeddings", c.max_seq_len},
         {"rms_norm_eps", c.rms_eps},
         {"rope_theta", c.rope_theta}};
  } else {
    const GPT2Config& c = gpt2;
    j = {{"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_embd", c.n_embd},
         {"vocab_size", c.vocab_size},
         {"padded_vocab_size", c.padded_vocab_size},
         {"n_positions", c.max_seq_len}};
  }
  return j.dump();
}

namespace {
// The shortest decimal that reads back as the same float (1e-06, not 9.99999997e-07): what
// the source config.json held, so an export's config equals it.
double exact(float f) {
  char b[32];
  const auto r = std::to_chars(b, b + sizeof b, f);
  return std::strtod(std::string(b, r.ptr).c_str(), nullptr);
}
}  // namespace

std::string ModelSpec::hf_config_json(DType dtype) const {
  const char* td = dtype == DType::f32 ? "float32" : dtype == DType::bf16 ? "bfloat16" : "float16";
  nlohmann::ordered_json j;
  if (arch == "llama") {
    const LlamaConfig& c = llama;
    j = {{"architectures", {"LlamaForCausalLM"}},
         {"model_type", "llama"},
         {"hidden_act", "silu"},
         {"hidden_size", c.n_embd},
         {"intermediate_size", c.intermediate},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_kv_head},
         {"max_position_embeddings", c.max_seq_len},
         {"rms_norm_eps", exact(c.rms_eps)},
         {"rope_theta", exact(c.rope_theta)},
         {"rope_scaling", nullptr},
         {"attention_bias", false},
         {"mlp_bias", false},
         {"tie_word_embeddings", false},
         {"vocab_size", c.vocab_size},
         {"torch_dtype", td}};
    if (c.padded_vocab_size != (c.vocab_size + 63) / 64 * 64) j["padded_vocab_size"] = c.padded_vocab_size;
  } else {
    const GPT2Config& c = gpt2;
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", 1e-5},
         {"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_embd", c.n_embd},
         {"n_positions", c.max_seq_len},
         {"n_ctx", c.max_seq_len},
         {"vocab_size", c.vocab_size},
         {"tie_word_embeddings", true},
         {"torch_dtype", td}};
    // Strata's own padding, when it is not the default (Hugging Face ignores the extra key).
    if (c.padded_vocab_size != (c.vocab_size + 63) / 64 * 64) j["padded_vocab_size"] = c.padded_vocab_size;
  }
  return j.dump(2) + "\n";
}

}  // namespace strata
