#include "model/model_factory.h"

#include "core/error.h"
#include "model/gpt2.h"
#include "model/llama.h"

namespace strata {

std::vector<ParamSpec> unit_layout(const ModelSpec& spec) { return spec.family->unit_layout(spec); }

size_t model_device_bytes(const ModelSpec& spec, int micro_batch, int seq_len, DType dtype,
                          const ModelStorage& storage) {
  const size_t n = size_t(spec.num_params());
  size_t bytes = 0;
  if (storage.params && (storage.master || dtype == DType::f32)) bytes += n * 4;  // params:master_f32
  if (storage.params && dtype != DType::f32) bytes += n * dtype_size(dtype);      // params:compute
  if (storage.grads) bytes += n * 4;                                              // grads:f32
  if (storage.frozen) bytes += Transformer::frozen_sink_bytes(unit_layout(spec), spec.n_layer() + 2);
  const bool offload = storage.offload != nullptr;
  return bytes + (spec.family->model_class() == ModelClass::decoder
                      ? Llama::activation_bytes(spec.llama, micro_batch, seq_len, dtype, storage.checkpoint, offload)
                      : GPT2::activation_bytes(spec.gpt2, micro_batch, seq_len, dtype, storage.checkpoint, offload));
}

std::unique_ptr<Model> make_model(const ModelSpec& spec, Backend& backend, int micro_batch, int seq_len, DType dtype,
                                  ModelStorage storage, UnitHooks* hooks) {
  const size_t before = backend.budget().used();
  std::unique_ptr<Model> m;
  if (spec.family->model_class() == ModelClass::decoder)
    m = std::make_unique<Llama>(backend, spec.llama, micro_batch, seq_len, dtype, storage, hooks);
  else
    m = std::make_unique<GPT2>(backend, spec.gpt2, micro_batch, seq_len, dtype, storage, hooks);
  // strata plan sizes runs with model_device_bytes: what the model allocated must be exactly that.
  const size_t used = backend.budget().used() - before,
               want = model_device_bytes(spec, micro_batch, seq_len, dtype, storage);
  STRATA_CHECK(used == want,
               "the model allocated " + std::to_string(used) + " device bytes but model_device_bytes says " +
                   std::to_string(want),
               "this is a bug: model_device_bytes must mirror the model constructors (strata plan relies on it)");
  return m;
}

}  // namespace strata
