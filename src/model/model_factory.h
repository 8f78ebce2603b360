// Building a model of a spec's architecture, and its parameter layout.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/model_spec.h"

namespace strata {

// The unit-major parameter layout of the spec's architecture.
std::vector<ParamSpec> unit_layout(const ModelSpec& spec);

// The device bytes a model of this shape allocates itself: its full parameter copies and
// gradients (as `storage` asks) and the activation arena. make_model checks it.
size_t model_device_bytes(const ModelSpec& spec, int micro_batch, int seq_len, DType dtype,
                          const ModelStorage& storage);

std::unique_ptr<Model> make_model(const ModelSpec& spec, Backend& backend, int micro_batch, int seq_len, DType dtype,
                                  ModelStorage storage = {}, UnitHooks* hooks = nullptr);

}  // namespace strata
