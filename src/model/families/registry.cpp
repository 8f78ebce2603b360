// The registry: one line per family. A family's file defines its accessor; adding a family
// is that file, its declaration and its entry here, and its tests.
#include "core/error.h"
#include "model/model_family.h"

namespace strata {

const ModelFamily& gpt2_family();
const ModelFamily& llama_family();
const ModelFamily& mistral_family();
const ModelFamily& qwen2_family();
const ModelFamily& qwen3_family();
const ModelFamily& phi3_family();
const ModelFamily& olmo2_family();
const ModelFamily& gemma2_family();
const ModelFamily& gemma3_text_family();
const ModelFamily& gemma3_family();

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> families = {
      &gpt2_family(), &llama_family(), &mistral_family(), &qwen2_family(),       &qwen3_family(),
      &phi3_family(), &olmo2_family(), &gemma2_family(),  &gemma3_text_family(), &gemma3_family(),
  };
  return families;
}

const ModelFamily& default_model_family() { return gpt2_family(); }

std::string model_family_names() {
  std::string names;
  for (const ModelFamily* f : model_families()) names += (names.empty() ? "" : ", ") + f->model_type();
  return names;
}

const ModelFamily& model_family(const std::string& model_type, const std::string& origin) {
  for (const ModelFamily* f : model_families())
    if (f->model_type() == model_type) return *f;
  throw_error("model config '" + origin + "': model_type '" + model_type + "' is not one Strata trains",
              "Strata trains the model_types " + model_family_names());
}

}  // namespace strata
