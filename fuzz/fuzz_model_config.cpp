// libFuzzer target: the model config readers (Strata's and Hugging Face's config.json, GPT-2
// and Llama). An accepted config must give a positive parameter count without overflow and
// read back from its own shape JSON and Hugging Face config.json as the same shape.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/model_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const strata::ModelSpec s = strata::ModelSpec::from_json_text(text, "fuzz");
    if (s.num_params() <= 0) __builtin_trap();
    const std::string shape = s.shape_json();
    if (strata::ModelSpec::from_json_text(shape, "fuzz shape").shape_json() != shape) __builtin_trap();
    const strata::ModelSpec hf = strata::ModelSpec::from_json_text(s.hf_config_json(strata::DType::f32), "fuzz hf");
    if (hf.num_params() != s.num_params() || hf.family != s.family) __builtin_trap();
  } catch (const strata::Error&) {
  }
  return 0;
}
