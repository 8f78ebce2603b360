#include "model/model_spec.h"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
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
    const double kv = double(llama.n_kv_head) * llama.head_dim(), I = llama.intermediate, q = double(llama.q_dim());
    return L * (2 * C * q + 2 * C * kv + 3 * C * I) + V * C;  // q, o; k, v; gate, up, down; head
  }
  return L * 12 * C * C + V * C;  // qkv 3C², proj C², fc 4C², proj 4C²; the tied head
}

double ModelSpec::training_flops_per_token(int seq_len, bool recompute) const {
  const double forward = 2 * matmul_params() + 4.0 * n_layer() * double(seq_len) * n_embd();
  return (recompute ? 4 : 3) * forward;
}

namespace {
double exact(float f);

nlohmann::ordered_json rope_scaling_json(const RopeSpec& r) {
  if (r.scaling == RopeScaling::none) return nullptr;
  if (r.scaling == RopeScaling::linear) return {{"rope_type", "linear"}, {"factor", exact(r.factor)}};
  return {{"rope_type", "llama3"},
          {"factor", exact(r.factor)},
          {"low_freq_factor", exact(r.low_freq_factor)},
          {"high_freq_factor", exact(r.high_freq_factor)},
          {"original_max_position_embeddings", r.original_max_position}};
}

// The keys beyond Llama 2's. `all`: every key the family's config.json has (the export);
// otherwise only those that differ from Llama 2 (the shape JSON).
void llama_family_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) {
  const bool qwen = c.family == "qwen2" || c.family == "qwen3";
  if ((all && c.family != "qwen2") || c.head_dim_key) j["head_dim"] = c.head_dim();  // Qwen2 has no such key
  if (all || c.rope.scaling != RopeScaling::none) j["rope_scaling"] = rope_scaling_json(c.rope);
  if (all || c.tied) j["tie_word_embeddings"] = c.tied;
  if (c.family != "qwen2" && (all || c.o_bias)) j["attention_bias"] = c.o_bias;
  if (c.family == "llama" && all) j["mlp_bias"] = false;
  if (c.family == "mistral" || qwen)
    j["sliding_window"] = c.sliding_window_key ? nlohmann::ordered_json(c.sliding_window_key) : nullptr;
  if (qwen) j["use_sliding_window"] = c.use_sliding_window;
  if (qwen && c.max_window_layers) j["max_window_layers"] = c.max_window_layers;
}
}  // namespace

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
         {"rope_theta", c.rope.theta}};
    // What the later families add, only where present: the JSON of a Llama 2 shape (and so
    // its checkpoints' manifests) stays as it was.
    if (c.family != "llama") j["model_type"] = c.family;
    llama_family_keys(c, j, false);
  } else {
    const GPT2Config& c = gpt2;
    j = {{"n_layer", c.n_layer},
         {"n_head", c.n_head},
         {"n_embd", c.n_embd},
         {"vocab_size", c.vocab_size},
         {"padded_vocab_size", c.padded_vocab_size},
         {"n_positions", c.max_seq_len}};
    // Dropout only where a model has it: the shape JSON of the others stays as it was.
    for (const auto& [key, p] : {std::pair{"embd_pdrop", c.embd_pdrop}, std::pair{"attn_pdrop", c.attn_pdrop},
                                 std::pair{"resid_pdrop", c.resid_pdrop}})
      if (p > 0) j[key] = exact(p);
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
    static const std::map<std::string, std::string> architecture = {{"llama", "LlamaForCausalLM"},
                                                                    {"mistral", "MistralForCausalLM"},
                                                                    {"qwen2", "Qwen2ForCausalLM"},
                                                                    {"qwen3", "Qwen3ForCausalLM"}};
    j = {{"architectures", {architecture.at(c.family)}},
         {"model_type", c.family},
         {"hidden_act", "silu"},
         {"hidden_size", c.n_embd},
         {"intermediate_size", c.intermediate},
         {"num_hidden_layers", c.n_layer},
         {"num_attention_heads", c.n_head},
         {"num_key_value_heads", c.n_kv_head},
         {"max_position_embeddings", c.max_seq_len},
         {"rms_norm_eps", exact(c.rms_eps)},
         {"rope_theta", exact(c.rope.theta)},
         {"vocab_size", c.vocab_size},
         {"torch_dtype", td}};
    llama_family_keys(c, j, true);
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
         {"embd_pdrop", exact(c.embd_pdrop)},
         {"attn_pdrop", exact(c.attn_pdrop)},
         {"resid_pdrop", exact(c.resid_pdrop)},
         {"torch_dtype", td}};
    // Strata's own padding, when it is not the default (Hugging Face ignores the extra key).
    if (c.padded_vocab_size != (c.vocab_size + 63) / 64 * 64) j["padded_vocab_size"] = c.padded_vocab_size;
  }
  return j.dump(2) + "\n";
}

}  // namespace strata
