#include "model/model_factory.h"

#include "model/gpt2.h"
#include "model/llama.h"

namespace strata {

std::vector<ParamSpec> unit_layout(const ModelSpec& spec) {
  return spec.arch == "llama" ? llama_unit_layout(spec.llama) : gpt2_unit_layout(spec.gpt2);
}

std::unique_ptr<Model> make_model(const ModelSpec& spec, Backend& backend, int micro_batch, int seq_len, DType dtype,
                                  ModelStorage storage, UnitHooks* hooks) {
  if (spec.arch == "llama")
    return std::make_unique<Llama>(backend, spec.llama, micro_batch, seq_len, dtype, storage, hooks);
  return std::make_unique<GPT2>(backend, spec.gpt2, micro_batch, seq_len, dtype, storage, hooks);
}

}  // namespace strata
