// What the trainer needs from a model, whatever its architecture (GPT-2, Llama): its
// parameter table in the unit-major flat layout the ZeRO engine partitions, its own buffers
// when it keeps them, and forward/backward over one micro-batch.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/activation_store.h"
#include "model/gpt2_params.h"
#include "model/unit_hooks.h"

namespace strata {

// What a model allocates itself; the rest comes from the engine's hooks.
struct ModelStorage {
  bool params = true;  // full compute parameters; false: the hooks provide each unit
  bool grads = true;   // full f32 gradients; false: the hooks provide each unit's
  bool master = true;  // a full f32 master besides a 16-bit compute copy (false: the engine
                       // keeps the master, partitioned)
  // Activation checkpointing: keep each layer's output only, recompute the layer in
  // backward. `offload` keeps the checkpoints in host RAM (null: on the device).
  bool checkpoint = false;
  ActivationStore* offload = nullptr;
};

class Model : public UnitModel {
 public:
  virtual std::string arch() const = 0;      // "gpt2" | "llama"
  virtual std::string describe() const = 0;  // for the start-up line
  virtual int vocab_size() const = 0;
  virtual int num_layers() const = 0;
  virtual int hidden_size() const = 0;
  virtual const std::vector<ParamSpec>& param_specs() const = 0;
  virtual int64_t num_params() const = 0;
  virtual int64_t param_offset(int i) const = 0;
  virtual bool owns_params() const = 0;
  virtual bool owns_master() const = 0;
  virtual TensorView master_flat() const = 0;
  virtual TensorView compute_flat() const = 0;
  virtual TensorView grad_flat() const = 0;
  virtual void init_weights(uint64_t seed) = 0;
  virtual void sync_compute_params() = 0;
  virtual void forward(std::span<const int32_t> tokens) = 0;
  virtual TensorView logits() const = 0;  // f32 [B, T, padded vocab]
  virtual double backward(std::span<const int32_t> targets, float grad_scale) = 0;
  virtual void zero_grad() = 0;
  virtual size_t param_bytes() const = 0;
};

}  // namespace strata
