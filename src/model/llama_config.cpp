#include "model/llama_config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "model/families/decoder_family.h"
#include "model/llama_params.h"

namespace strata {

double ConfigValues::positive_number(const nlohmann::json& v, const std::string& key) const {
  STRATA_CHECK(v.is_number() && v.get<double>() > 0, "model config '" + origin + "': '" + key + "' must be positive",
               "fix the model config");
  return v.get<double>();
}

int ConfigValues::positive_int(const nlohmann::json& v, const std::string& key) const {
  STRATA_CHECK(v.is_number_integer() && v.get<int64_t>() > 0 && v.get<int64_t>() < (int64_t(1) << 31),
               "model config '" + origin + "': '" + key + "' must be a positive integer", "fix the model config");
  return v.get<int>();
}

int ConfigValues::positive_int_or_null(const nlohmann::json& v, const std::string& key) const {
  return v.is_null() ? 0 : positive_int(v, key);
}

bool ConfigValues::boolean(const nlohmann::json& v, const std::string& key) const {
  STRATA_CHECK(v.is_boolean(), "model config '" + origin + "': '" + key + "' must be true or false",
               "fix the model config");
  return v.get<bool>();
}

void ConfigValues::refuse_unless(bool ok, const std::string& key, const nlohmann::json& v,
                                 const std::string& what) const {
  STRATA_CHECK(ok, "model config '" + origin + "': " + key + " = " + v.dump() + " is not what Strata computes",
               "Strata supports " + what);
}

// A RoPE object: transformers 4's rope_scaling (its type and the scaling's keys) or
// transformers 5's rope_parameters (the same with rope_theta). The types Strata computes are
// default, linear and llama3; dynamic, yarn and longrope change with the sequence length.
void read_rope(const nlohmann::json& v, const std::string& key, bool with_theta, RopeSpec& rope, float* partial_rotary,
               const std::string& origin) {
  STRATA_CHECK(v.is_object(),
               "model config '" + origin + "': " + key + " must be " + (with_theta ? "" : "null or ") + "an object",
               "fix the model config");
  const auto text = [&](const char* k) {
    STRATA_CHECK(v[k].is_string(), "model config '" + origin + "': " + key + "." + k + " must be a string",
                 "fix the model config");
    return v[k].get<std::string>();
  };
  const std::string type = v.contains("rope_type") ? text("rope_type") : v.contains("type") ? text("type") : "default";
  STRATA_CHECK(
      type == "default" || type == "linear" || type == "llama3",
      "model config '" + origin + "': " + key + " = " + v.dump() + " is not what Strata computes",
      "Strata supports RoPE of type default, linear or llama3: dynamic, yarn and longrope (Phi-3's long-context "
      "models) change the frequencies with the sequence length, so a model trained with them is not trained "
      "as it will run");
  const ConfigValues values{origin};
  const auto number = [&](const nlohmann::json& x, const std::string& k) {
    return float(values.positive_number(x, key + "." + k));
  };
  for (auto r = v.begin(); r != v.end(); ++r) {
    const std::string& rk = r.key();
    if (rk == "type" || rk == "rope_type") continue;
    if (rk == "rope_theta" && with_theta)
      rope.theta = number(r.value(), rk);
    else if (rk == "partial_rotary_factor" && partial_rotary)  // transformers 5 moves Phi-3's here
      *partial_rotary = number(r.value(), rk);
    else if (rk == "factor") {  // with type default, as transformers does: read, and unused
      const float f = number(r.value(), rk);
      if (type != "default") rope.factor = f;
    } else if (rk == "low_freq_factor" && type == "llama3")
      rope.low_freq_factor = number(r.value(), rk);
    else if (rk == "high_freq_factor" && type == "llama3")
      rope.high_freq_factor = number(r.value(), rk);
    else if (rk == "original_max_position_embeddings" && type == "llama3") {
      STRATA_CHECK(r.value().is_number_integer() && r.value().get<int64_t>() > 0,
                   "model config '" + origin + "': " + key + "." + rk + " must be a positive integer",
                   "fix the model config");
      rope.original_max_position = r.value().get<int>();
    } else {
      const std::string takes =
          type == "llama3" ? "factor, low_freq_factor, high_freq_factor, original_max_position_embeddings" : "factor";
      throw_error("model config '" + origin + "': " + key + " has key '" + rk + "', which RoPE of type " + type +
                      " does not take",
                  "RoPE " + type + " takes " + (with_theta ? "rope_theta, rope_type and " : "") + takes);
    }
  }
  rope.scaling = type == "linear" ? RopeScaling::linear : type == "llama3" ? RopeScaling::llama3 : RopeScaling::none;
  STRATA_CHECK(type != "linear" || v.contains("factor"),
               "model config '" + origin + "': " + key + " of type linear needs a factor", "fix the model config");
  STRATA_CHECK(type != "llama3" ||
                   (v.contains("factor") && v.contains("low_freq_factor") && v.contains("high_freq_factor") &&
                    v.contains("original_max_position_embeddings") && rope.high_freq_factor != rope.low_freq_factor),
               "model config '" + origin + "': " + key +
                   " of type llama3 needs factor, low_freq_factor, high_freq_factor (≠ low) and "
                   "original_max_position_embeddings",
               "copy " + key + " from the model's original config.json");
}

namespace {

// transformers 5 may key rope_parameters by layer type ({"full_attention": {...},
// "sliding_attention": {...}}). A family with one RoPE for every layer takes the form when every
// layer type has the same parameters (Gemma-3 reads its two in its own file).
const nlohmann::json& one_rope_for_every_layer(const nlohmann::json& v, const std::string& origin) {
  if (!v.is_object() || v.empty()) return v;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (!it.value().is_object()) return v;  // the flat form
  for (auto it = v.begin(); it != v.end(); ++it)
    STRATA_CHECK(it.value() == v.begin().value(),
                 "model config '" + origin + "': rope_parameters differ by layer type (" + v.begin().key() + ": " +
                     v.begin().value().dump() + ", " + it.key() + ": " + it.value().dump() + ")",
                 "Strata's Llama applies one RoPE to every layer");
  return v.begin().value();
}
}  // namespace

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& origin) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  const std::string type = !j.is_discarded() && j.is_object() && j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>()
                               : "llama";
  const auto* decoder = dynamic_cast<const DecoderFamily*>(&model_family(type, origin));
  STRATA_CHECK(decoder, "model config '" + origin + "': model_type '" + type + "' is not a decoder family",
               "pass a Llama-family config");
  return read(text, origin, *decoder);
}

LlamaConfig LlamaConfig::read(const std::string& text, const std::string& origin, const DecoderFamily& family) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  STRATA_CHECK(!j.is_discarded() && j.is_object(), "model config '" + origin + "' is not a JSON object",
               "see configs/llama-tiny.json");
  LlamaConfig c;
  c.family = family.model_type();
  family.set_defaults(c);
  const ConfigValues r{origin};
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
                                                "_name_or_path",
                                                "max_sequence_length"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (family.read_key(k, v, c, r)) continue;  // the family's own keys first
    if (k == "num_hidden_layers" || k == "n_layer")
      c.n_layer = r.positive_int(v, k);
    else if (k == "num_attention_heads" || k == "n_head")
      c.n_head = r.positive_int(v, k);
    else if (k == "num_key_value_heads" || k == "n_kv_head")
      c.n_kv_head = r.positive_int(v, k);
    else if (k == "hidden_size" || k == "n_embd")
      c.n_embd = r.positive_int(v, k);
    else if (k == "intermediate_size")
      c.intermediate = r.positive_int(v, k);
    else if (k == "vocab_size")
      c.vocab_size = r.positive_int(v, k);
    else if (k == "padded_vocab_size")
      c.padded_vocab_size = r.positive_int(v, k);
    else if (k == "max_position_embeddings" || k == "n_positions")
      c.max_seq_len = r.positive_int(v, k);
    else if (k == "rms_norm_eps")
      c.rms_eps = float(r.positive_number(v, k));
    else if (k == "rope_theta")
      c.rope.theta = float(r.positive_number(v, k));
    else if (k == "head_dim")
      c.head_dim_key = r.positive_int_or_null(v, k);
    else if (k == "hidden_act")
      r.refuse_unless(v == "silu", k, v, "the SwiGLU MLP (hidden_act silu)");
    else if (k == "tie_word_embeddings")
      c.tied = r.boolean(v, k);
    else if (k == "attention_bias")  // q, k, v and o biases
      c.qkv_bias = c.o_bias = r.boolean(v, k);
    else if (k == "mlp_bias")
      r.refuse_unless(v == false, k, v, "an MLP without biases (mlp_bias false)");
    else if (k == "attention_dropout")
      r.refuse_unless(v.is_number() && v.get<double>() == 0, k, v, "attention without dropout (attention_dropout 0)");
    else if (k == "pretraining_tp")
      r.refuse_unless(v == 1, k, v, "pretraining_tp 1");
    else if (k == "sliding_window")
      c.sliding_window_key = r.positive_int_or_null(v, k);
    else if (k == "layer_types") {  // per layer: full_attention, or sliding_attention under the window
      STRATA_CHECK(v.is_array(), "model config '" + origin + "': layer_types must be a list", "fix the model config");
      c.sliding_layers.clear();
      for (const auto& t : v) {
        r.refuse_unless(t == "full_attention" || t == "sliding_attention", k, t,
                        "layers of full_attention and sliding_attention");
        c.sliding_layers.push_back(t == "sliding_attention");
      }
      if (std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end())
        c.use_sliding_window = true;   // some layers slide: the window is in force
    } else if (k == "rope_scaling") {  // transformers 4
      if (!v.is_null()) read_rope(v, k, false, c.rope, &c.partial_rotary, origin);
    } else if (k == "rope_parameters") {  // transformers 5: rope_theta and the scaling in one object
      read_rope(one_rope_for_every_layer(v, origin), k, true, c.rope, &c.partial_rotary, origin);
    } else if (!ignored.count(k))
      throw_error("model config '" + origin + "': unknown key '" + k + "' for model_type " + c.family,
                  family.display_name() +
                      " configs take hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
                      "num_key_value_heads, head_dim, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta, "
                      "rope_scaling, rope_parameters, tie_word_embeddings, attention_bias, sliding_window, "
                      "layer_types" +
                      family.own_keys());
  }
  if (c.n_kv_head == 0) c.n_kv_head = c.n_head;
  if (c.padded_vocab_size == 0) c.padded_vocab_size = (c.vocab_size + 63) / 64 * 64;
  // A head_dim that states the default is the default (an export's config reads back equal).
  if (c.head_dim_key && c.n_head && c.n_embd % c.n_head == 0 && c.head_dim_key == c.n_embd / c.n_head)
    c.head_dim_key = 0;
  if (c.partial_rotary != 1.0f && c.n_head && (c.head_dim_key || c.n_embd % c.n_head == 0))
    c.rope.rotary_dim = int(float(c.head_dim()) * c.partial_rotary);  // transformers' int(head_dim · factor)
  family.finish_config(c);
  if (c.local_rope_own) c.local_rope.rotary_dim = c.rope.rotary_dim;
  c.validate(origin);
  return c;
}

void LlamaConfig::validate(const std::string& origin) const {
  auto need = [&](bool ok, const std::string& what) {
    STRATA_CHECK(ok, "model config '" + origin + "': " + what, "fix the model config");
  };
  need(n_layer > 0 && n_head > 0 && n_embd > 0 && intermediate > 0 && vocab_size > 0 && max_seq_len > 0,
       "num_hidden_layers, num_attention_heads, hidden_size, intermediate_size, vocab_size and "
       "max_position_embeddings are all required");
  need(head_dim_key || n_embd % n_head == 0,
       "hidden_size must be a multiple of num_attention_heads (or head_dim given)");
  need(head_dim() % 2 == 0, "the head size must be even for the rotary embeddings");
  need(partial_rotary > 0 && partial_rotary <= 1 && rope.rotary_dim % 2 == 0,
       "partial_rotary_factor must be in (0, 1] and give an even number of rotary dims");
  need(n_kv_head > 0 && n_head % n_kv_head == 0, "num_attention_heads must be a multiple of num_key_value_heads");
  need(padded_vocab_size >= vocab_size, "padded_vocab_size must be at least vocab_size");
  need(sliding_layers.empty() || sliding_layers.size() == size_t(n_layer),
       "layer_types must name one type per layer (num_hidden_layers)");
}

int64_t LlamaConfig::num_params() const {
  int64_t n = 0;
  for (const ParamSpec& p : llama_unit_layout(*this)) n += p.shape.numel();
  return n;
}

}  // namespace strata
