#include "model/gpt2_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "model/gpt2_params.h"

namespace strata {

GPT2Config GPT2Config::load(const std::string& path) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "cannot open model config '" + path + "'",
               "pass --model with a JSON file such as configs/default.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

GPT2Config GPT2Config::from_json_text(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for huge numbers
    throw_error("model config '" + origin + "' is not valid JSON: " + e.what(), "fix the file's syntax");
  }
  STRATA_CHECK(j.is_object(), "model config '" + origin + "' is not a JSON object", "see configs/default.json");
  GPT2Config c;
  // A Hugging Face config.json (model_type "gpt2") carries many more keys: the ones that do
  // not change the computation are accepted, the ones that would are checked to be what
  // Strata computes, and anything else is still an error.
  const bool hf = j.contains("model_type");
  if (hf)
    STRATA_CHECK(j["model_type"] == "gpt2",
                 "model config '" + origin + "' is a Hugging Face '" + j["model_type"].dump() + "' model",
                 "Strata's GPT-2 path reads model_type \"gpt2\" configs");
  static const std::set<std::string> hf_keys = {
      "activation_function", "layer_norm_epsilon", "n_inner", "tie_word_embeddings", "scale_attn_weights",
      "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention", "attn_pdrop", "embd_pdrop",
      "resid_pdrop", "summary_activation", "summary_first_dropout", "summary_proj_to_labels", "summary_type",
      "summary_use_proj", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "task_specific_params",
      "torch_dtype", "dtype", "transformers_version", "use_cache", "_name_or_path", "id2label", "label2id",
      // bookkeeping of older configs (openai-community/gpt2 and its copies)
      "n_special", "predict_special_tokens", "_num_labels", "num_labels", "output_past", "finetuning_task",
      "problem_type", "gradient_checkpointing", "return_dict", "output_hidden_states", "output_attentions",
      "tokenizer_class"};
  auto check_hf = [&](const std::string& key, const nlohmann::json& v) {
    auto need = [&](bool ok, const std::string& expected) {
      STRATA_CHECK(ok,
                   "model config '" + origin + "': " + key + " = " + v.dump() + " is not what Strata's GPT-2 computes",
                   "Strata's GPT-2 uses " + expected);
    };
    if (key == "activation_function")
      need(v == "gelu_new" || v == "gelu_pytorch_tanh", "the tanh GELU (gelu_new)");
    else if (key == "layer_norm_epsilon")
      need(v.is_number() && std::abs(v.get<double>() - 1e-5) < 1e-12, "layer_norm_epsilon 1e-5");
    else if (key == "tie_word_embeddings" || key == "scale_attn_weights")
      need(v == true, key + " true");
    else if (key == "scale_attn_by_inverse_layer_idx" || key == "reorder_and_upcast_attn" ||
             key == "add_cross_attention")
      need(v == false, key + " false");
    else if (key == "n_special")  // GPT-1's extra embedding rows; GPT-2's configs carry 0
      need(v == 0, "no special-token rows (n_special 0)");
    else if (key == "n_inner")
      need(v.is_null() || (v.is_number_integer() && j.contains("n_embd") && v == 4 * j["n_embd"].get<int>()),
           "n_inner = 4 * n_embd");
    // Token ids and bookkeeping do not change training (the dropout probabilities are read
    // above).
  };
  auto get_int = [&](const nlohmann::json& v, const std::string& key) {
    STRATA_CHECK(v.is_number_integer(), "model config '" + origin + "': '" + key + "' must be an integer",
                 "write it as a number, e.g. \"" + key + "\": 4");
    return v.get<int>();
  };
  for (auto& [key, v] : j.items()) {
    if (key == "n_layer" || key == "num_layers")
      c.n_layer = get_int(v, key);
    else if (key == "n_head" || key == "num_heads")
      c.n_head = get_int(v, key);
    else if (key == "n_embd" || key == "channels" || key == "hidden_size")
      c.n_embd = get_int(v, key);
    else if (key == "vocab_size")
      c.vocab_size = get_int(v, key);
    else if (key == "padded_vocab_size")
      c.padded_vocab_size = get_int(v, key);
    else if (key == "n_positions" || key == "max_seq_len" || key == "n_ctx")
      c.max_seq_len = get_int(v, key);
    else if (key == "embd_pdrop" || key == "attn_pdrop" || key == "resid_pdrop") {
      STRATA_CHECK(v.is_number() && v.get<double>() >= 0 && v.get<double>() < 1,
                   "model config '" + origin + "': '" + key + "' must be a probability in [0, 1)",
                   "fix the model config (0 turns that dropout off)");
      (key == "embd_pdrop" ? c.embd_pdrop : key == "attn_pdrop" ? c.attn_pdrop : c.resid_pdrop) = v.get<float>();
    } else if (key == "model_type" || key == "architectures" || key == "comment" || key == "name")
      continue;
    else if (hf && hf_keys.count(key))
      check_hf(key, v);
    else
      throw_error("model config '" + origin + "': unknown key '" + key + "'",
                  "GPT-2 configs take n_layer, n_head, n_embd, vocab_size, padded_vocab_size, n_positions");
  }
  if (c.padded_vocab_size == 0) c.padded_vocab_size = (c.vocab_size + 63) / 64 * 64;
  c.validate(origin);
  return c;
}

void GPT2Config::validate(const std::string& origin) const {
  auto need = [&](bool ok, const std::string& what) {
    STRATA_CHECK(ok, "model config '" + origin + "': " + what, "fix the model config");
  };
  need(n_layer > 0, "n_layer must be positive");
  need(n_head > 0, "n_head must be positive");
  need(
      n_embd > 0 && n_embd % n_head == 0,
      "n_embd (" + std::to_string(n_embd) + ") must be a positive multiple of n_head (" + std::to_string(n_head) + ")");
  need(vocab_size > 0, "vocab_size must be positive");
  need(padded_vocab_size >= vocab_size, "padded_vocab_size must be at least vocab_size");
  need(max_seq_len > 0, "n_positions must be positive");
}

int64_t GPT2Config::num_params() const {
  int64_t n = 0;
  for (const auto& p : gpt2_param_specs(*this)) n += p.shape.numel();
  return n;
}

}  // namespace strata
