// Gemma-3: its language model (model_type gemma3_text; Gemma3ForCausalLM, as the 1B model is
// saved) and Gemma3ForConditionalGeneration (model_type gemma3: the 4B, 12B and 27B models),
// whose language model Strata trains: its text_config is read, its language model's tensors
// imported, the vision tower and projector left out with a note, and the export is the text
// model. Gemma's layers (gemma.h) with per-head q/k norms, no soft-caps by default, five
// sliding layers to each full one, and the sliding layers' own RoPE (rope_local_base_freq).
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/families/gemma.h"
#include "model/model_spec.h"

namespace strata {
namespace {

class Gemma3TextFamily : public GemmaFamily {
 public:
  std::string model_type() const override { return "gemma3_text"; }
  std::string display_name() const override { return "Gemma-3"; }
  std::string hf_architecture() const override { return "Gemma3ForCausalLM"; }
  // transformers' Gemma3TextConfig defaults (Gemma-3 4B's shape): the 4B-27B models' text_config
  // states only what differs.
  void set_defaults(LlamaConfig& c) const override {
    GemmaFamily::set_defaults(c);
    c.vocab_size = 262208, c.n_embd = 2304, c.intermediate = 9216, c.n_layer = 26, c.n_head = 8, c.n_kv_head = 4;
    c.head_dim_key = 256, c.max_seq_len = 131072, c.rms_eps = 1e-6f, c.sliding_window_key = 4096;
    c.rope.theta = 1e6f;
    c.qk_norm = true;
    c.local_rope_own = true;  // rope_local_base_freq's default
    c.local_rope.theta = 10000.0f;
  }
  bool read_key(const std::string& key, const nlohmann::json& v, LlamaConfig& c, const ConfigValues& r) const override {
    if (key == "rope_local_base_freq") {
      c.local_rope.theta = float(r.positive_number(v, key));
      return true;
    }
    // transformers 5: one RoPE per layer type.
    if (key == "rope_parameters" && v.is_object() &&
        (v.contains("full_attention") || v.contains("sliding_attention"))) {
      for (auto it = v.begin(); it != v.end(); ++it) {
        STRATA_CHECK(it.key() == "full_attention" || it.key() == "sliding_attention",
                     "model config '" + r.origin + "': rope_parameters has layer type '" + it.key() + "'",
                     "Gemma-3's layers are full_attention or sliding_attention");
        read_rope(it.value(), key + "." + it.key(), true, it.key() == "full_attention" ? c.rope : c.local_rope,
                  &c.partial_rotary, r.origin);
      }
      return true;
    }
    return GemmaFamily::read_key(key, v, c, r);
  }
  std::string own_keys() const override { return GemmaFamily::own_keys() + ", rope_local_base_freq"; }
  void export_keys(const LlamaConfig& c, nlohmann::ordered_json& j, bool all) const override {
    GemmaFamily::export_keys(c, j, all);
    j["rope_local_base_freq"] = shortest_decimal(c.local_rope.theta);
  }
  // The language model inside Gemma3ForConditionalGeneration's checkpoints, as transformers
  // 4.5x and 5 save it (language_model.model.*) and as later layouts name it (model.language_model.*).
  std::vector<std::string> hf_aliases(const std::string& name) const override {
    if (name.starts_with("model.")) return {"language_model." + name, "model.language_model." + name.substr(6)};
    return {"language_model." + name};  // lm_head
  }
  std::string hf_left_out(const std::string& name) const override {
    for (const char* p : {"vision_tower.", "model.vision_tower."})
      if (name.starts_with(p))
        return "the vision tower (Strata trains Gemma-3's language model; the export is it alone)";
    for (const char* p : {"multi_modal_projector.", "model.multi_modal_projector."})
      if (name.starts_with(p)) return "the multimodal projector";
    return "";
  }

 protected:
  int default_sliding_pattern() const override { return 6; }
};

// model_type gemma3 (Gemma3ForConditionalGeneration): its text_config, read as Gemma-3's
// language model, which the spec then is.
class Gemma3Family final : public Gemma3TextFamily {
 public:
  std::string model_type() const override { return "gemma3"; }
  std::string display_name() const override { return "Gemma-3 (multimodal)"; }
  void read_config(const std::string& text, const std::string& origin, ModelSpec& spec) const override {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    STRATA_CHECK(!j.is_discarded() && j.is_object() && j.contains("text_config") && j["text_config"].is_object(),
                 "model config '" + origin + "': a Gemma3ForConditionalGeneration config without a text_config object",
                 "give the model's config.json as it was downloaded");
    spec.family = &gemma3_text_family();
    spec.family->read_config(j["text_config"].dump(), origin + " (text_config)", spec);
  }
};

}  // namespace

const ModelFamily& gemma3_text_family() {
  static const Gemma3TextFamily f;
  return f;
}

const ModelFamily& gemma3_family() {
  static const Gemma3Family f;
  return f;
}

}  // namespace strata
