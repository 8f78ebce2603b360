#include "model/llama_config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace strata {

std::string model_arch_of(const std::string& text, const std::string& origin) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  STRATA_CHECK(!j.is_discarded(), "model config '" + origin + "' is not valid JSON", "fix the file's syntax");
  if (j.is_object() &&
      ((j.contains("model_type") && j["model_type"] == "llama") || (j.contains("arch") && j["arch"] == "llama")))
    return "llama";
  return "gpt2";
}

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& origin) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  STRATA_CHECK(!j.is_discarded() && j.is_object(), "model config '" + origin + "' is not a JSON object",
               "see configs/llama-tiny.json");
  LlamaConfig c;
  auto get_int = [&](const nlohmann::json& v, const std::string& key) {
    STRATA_CHECK(v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() < (int64_t(1) << 31),
                 "model config '" + origin + "': '" + key + "' must be a positive integer", "fix the model config");
    return v.get<int>();
  };
  auto get_num = [&](const nlohmann::json& v, const std::string& key) {
    STRATA_CHECK(v.is_number() && v.get<double>() > 0, "model config '" + origin + "': '" + key + "' must be positive",
                 "fix the model config");
    return v.get<double>();
  };
  auto refuse_unless = [&](bool ok, const std::string& key, const nlohmann::json& v, const std::string& what) {
    STRATA_CHECK(ok,
                 "model config '" + origin + "': " + key + " = " + v.dump() + " is not what Strata's Llama computes",
                 "Strata's Llama supports " + what);
  };
  static const std::set<std::string> ignored = {"architectures",
                                                "model_type",
                                                "arch",
                                                "comment",
                                                "name",
                                                "bos_token_id",
                                                "eos_token_id",
                                                "pad_token_id",
                                                "torch_dtype",
                                                "dtype",
                                                "transformers_version",
                                                "use_cache",
                                                "initializer_range",
                                                "attention_dropout",
                                                "_name_or_path",
                                                "max_sequence_length"};
  int head_dim = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "num_hidden_layers" || k == "n_layer")
      c.n_layer = get_int(v, k);
    else if (k == "num_attention_heads" || k == "n_head")
      c.n_head = get_int(v, k);
    else if (k == "num_key_value_heads" || k == "n_kv_head")
      c.n_kv_head = get_int(v, k);
    else if (k == "hidden_size" || k == "n_embd")
      c.n_embd = get_int(v, k);
    else if (k == "intermediate_size")
      c.intermediate = get_int(v, k);
    else if (k == "vocab_size")
      c.vocab_size = get_int(v, k);
    else if (k == "padded_vocab_size")
      c.padded_vocab_size = get_int(v, k);
    else if (k == "max_position_embeddings" || k == "n_positions")
      c.max_seq_len = get_int(v, k);
    else if (k == "rms_norm_eps")
      c.rms_eps = float(get_num(v, k));
    else if (k == "rope_theta")
      c.rope_theta = float(get_num(v, k));
    else if (k == "head_dim")
      head_dim = get_int(v, k);
    else if (k == "hidden_act")
      refuse_unless(v == "silu", k, v, "the SwiGLU MLP (hidden_act silu)");
    else if (k == "tie_word_embeddings")
      refuse_unless(v == false, k, v, "an untied output head (tie_word_embeddings false)");
    else if (k == "attention_bias" || k == "mlp_bias")
      refuse_unless(v == false, k, v, "projections without biases");
    else if (k == "rope_scaling")
      refuse_unless(v.is_null(), k, v, "unscaled rotary embeddings (rope_scaling null)");
    else if (k == "pretraining_tp")
      refuse_unless(v == 1, k, v, "pretraining_tp 1");
    else if (!ignored.count(k))
      throw_error("model config '" + origin + "': unknown key '" + k + "'",
                  "Llama configs take hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
                  "num_key_value_heads, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta");
  }
  if (c.n_kv_head == 0) c.n_kv_head = c.n_head;
  if (c.padded_vocab_size == 0) c.padded_vocab_size = (c.vocab_size + 63) / 64 * 64;
  c.validate(origin);
  STRATA_CHECK(head_dim == 0 || head_dim == c.head_dim(),
               "model config '" + origin + "': head_dim " + std::to_string(head_dim) + " is not hidden_size / heads",
               "Strata's Llama uses head_dim = hidden_size / num_attention_heads");
  return c;
}

void LlamaConfig::validate(const std::string& origin) const {
  auto need = [&](bool ok, const std::string& what) {
    STRATA_CHECK(ok, "model config '" + origin + "': " + what, "fix the model config");
  };
  need(n_layer > 0 && n_head > 0 && n_embd > 0 && intermediate > 0 && vocab_size > 0 && max_seq_len > 0,
       "num_hidden_layers, num_attention_heads, hidden_size, intermediate_size, vocab_size and "
       "max_position_embeddings are all required");
  need(n_embd % n_head == 0 && head_dim() % 2 == 0, "hidden_size must be num_attention_heads × an even head size");
  need(n_kv_head > 0 && n_head % n_kv_head == 0, "num_attention_heads must be a multiple of num_key_value_heads");
  need(padded_vocab_size >= vocab_size, "padded_vocab_size must be at least vocab_size");
}

int64_t LlamaConfig::num_params() const {
  const int64_t C = n_embd, d = head_dim(), I = intermediate, Vp = padded_vocab_size;
  const int64_t layer =
      C + int64_t(n_head) * d * C + 2 * int64_t(n_kv_head) * d * C + C * int64_t(n_head) * d + C + 3 * I * C;
  return Vp * C + int64_t(n_layer) * layer + C + Vp * C;
}

}  // namespace strata
