// A model family: everything Strata knows about one config.json model_type, in one place.
// Each family is one registered object (model/families/, listed in families/registry.cpp)
// that declares its config keys, its Hugging Face tensor names and layouts, its export
// config, its shapes for the planner and the benchmarks, and which model class runs its
// layers with which options. Everything else (the model factory, HF import and export,
// checkpoint manifests, the planner, bench) looks the family up here. No backend: the
// config fuzzer links this.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/param_spec.h"

namespace strata {

struct ModelSpec;

// The model class that runs a family's layer steps: GPT-2's (gpt2.h) or the pre-/post-norm
// decoder with rotary attention (llama.h), which takes the family's options from its config.
enum class ModelClass { gpt2, decoder };

// A linear layer as the model's ops call it (fused where the model fuses): `count` per step.
struct LinearShape {
  int64_t in, out;
  int count;
};

// The attention's and the MLP's widths, which size the backend's op scratch.
struct LayerWidths {
  int n_head, head_dim;
  int64_t qkv_width;    // the fused q|k|v row
  int64_t widest;       // the widest MLP activation
  int rope_tables = 1;  // distinct RoPEs the layers use
};

// One Strata tensor's name in a Hugging Face checkpoint. Consecutive tensors of a unit with
// the same name form one fused HF tensor, their rows stacked (Phi-3's qkv_proj).
struct HfName {
  std::string name;
  bool transposed = false;  // HF stores [cols, rows] (GPT-2's Conv1D)
  bool vocab_rows = false;  // rows beyond the real vocabulary are Strata's padding, absent there
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // config.json's model_type: the registry's key.
  virtual std::string model_type() const = 0;
  // As messages and model descriptions name it ("Qwen3").
  virtual std::string display_name() const = 0;
  // config.json's architectures[0] on export ("Qwen3ForCausalLM").
  virtual std::string hf_architecture() const = 0;
  virtual ModelClass model_class() const = 0;
  // Strata's architecture name in manifests and run summaries: "gpt2" or "llama".
  std::string arch() const { return model_class() == ModelClass::gpt2 ? "gpt2" : "llama"; }

  // ---- config ----
  // Reads a config.json (or Strata's own JSON) of this family into spec's config; unknown
  // keys are errors naming them, keys that would change the computation in a way Strata does
  // not compute are refused with the reason.
  virtual void read_config(const std::string& text, const std::string& origin, ModelSpec& spec) const = 0;
  // Strata's own JSON of the shape (checkpoint manifests): read_config reads it back.
  virtual std::string shape_json(const ModelSpec& spec) const = 0;
  // Hugging Face's config.json, as save_pretrained writes it.
  virtual std::string hf_config_json(const ModelSpec& spec, DType dtype) const = 0;

  // ---- shapes ----
  virtual int n_layer(const ModelSpec& spec) const = 0;
  virtual int n_embd(const ModelSpec& spec) const = 0;
  virtual int vocab_size(const ModelSpec& spec) const = 0;
  virtual int padded_vocab_size(const ModelSpec& spec) const = 0;
  virtual int64_t num_params(const ModelSpec& spec) const = 0;
  // The unit-major parameter layout (unit 0 the embedding, 1+l layer l, L+1 the head).
  virtual std::vector<ParamSpec> unit_layout(const ModelSpec& spec) const = 0;
  // Every linear layer a token meets, the output head last (rows: the padded vocabulary).
  virtual std::vector<LinearShape> linears(const ModelSpec& spec) const = 0;
  virtual LayerWidths layer_widths(const ModelSpec& spec) const = 0;

  // ---- Hugging Face weights ----
  virtual HfName hf_name(const ModelSpec& spec, const ParamSpec& p) const = 0;
  // A tensor a checkpoint may hold that has no place in Strata and changes nothing
  // (precomputed rotary frequencies, causal-mask buffers, a tied head saved anyway).
  virtual bool hf_ignorable(const ModelSpec& spec, const std::string& name) const = 0;
  // Other names a checkpoint may give a tensor (GPT-2's "transformer." prefix; the language
  // model inside a multimodal checkpoint), tried in order after its own.
  virtual std::vector<std::string> hf_aliases(const std::string& /*name*/) const { return {}; }
  // The part of a larger checkpoint a tensor belongs to, which Strata leaves out (Gemma-3's
  // vision tower): named in the import's note; "" for none.
  virtual std::string hf_left_out(const std::string& /*name*/) const { return ""; }
  // The modules LoRA adapts when none are named: PEFT's default for the model type (its
  // TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), the attention's q and v by default.
  virtual std::vector<std::string> lora_default_targets() const { return {"q_proj", "v_proj"}; }
  // The path of the decoder inside the *ForCausalLM module, before the names hf_name gives:
  // PEFT keys modules by their full path (GPT-2's "transformer."; "" where hf_name has it).
  virtual std::string hf_module_prefix() const { return ""; }
};

// The registered families, in the registry's order.
const std::vector<const ModelFamily*>& model_families();
// The family of a model_type; an Error listing the registered ones if none.
const ModelFamily& model_family(const std::string& model_type, const std::string& origin);
// Every registered model_type, comma-separated (for messages).
std::string model_family_names();
// GPT-2's family: what a config without a model_type describes.
const ModelFamily& default_model_family();

// For the families' JSON: the shortest decimal that reads back as the same float (1e-06, not
// 9.99999997e-07), what the source config.json held, so an export's config equals it.
double shortest_decimal(float f);
// config.json's name of a dtype: "float32", "bfloat16", "float16".
const char* hf_dtype_name(DType dtype);

}  // namespace strata
