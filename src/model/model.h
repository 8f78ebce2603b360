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
  // The weights are not trained (the base under low-rank adapters): no gradient of a matrix
  // is made and the embedding's backward is skipped; `grads` must be false.
  bool frozen = false;
};

class Model : public UnitModel {
 public:
  virtual Backend& backend() const = 0;      // where its memory lives and its ops run
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
  // `positions`: packed rows, several records in a row, each with positions 0, 1, … of its
  // own and attended on its own (Backend::encoder_forward); empty: one record per row.
  virtual void forward(std::span<const int32_t> tokens, std::span<const int32_t> positions = {}) = 0;
  // Evaluation of one micro-batch: forward without dropout and without keeping anything for a
  // backward (no activation checkpoint leaves the device), then its mean loss over the
  // unmasked targets, times loss_weight, added to *loss_sum (a device f64 scalar). No
  // gradient is made. Under a ZeRO engine, between its begin_eval and end_eval.
  virtual void evaluate(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                        std::span<const int32_t> targets, double* loss_sum, double loss_weight) = 0;
  // Training mode for the next forward and backward: the model's dropout (GPT-2's
  // *_pdrop) applies, its masks drawn from (seed, the global sample number first_sample + b
  // of batch row b, and the element) alone (kernels/math/dropout_math.h). Without this call
  // a model runs as in evaluation, without dropout. Models without dropout ignore it.
  virtual void set_dropout_rows(uint64_t /*seed*/, int64_t /*first_sample*/) {}
  virtual TensorView logits() const = 0;  // f32 [B, T, padded vocab]
  // One micro-batch's backward (after forward). Its mean loss over the unmasked targets,
  // times loss_weight, is added to *loss_sum: a device f64 scalar (null: not kept) that the
  // trainer reads back once per step, never per call.
  virtual void backward(std::span<const int32_t> targets, float grad_scale, double* loss_sum, double loss_weight) = 0;
  virtual void zero_grad() = 0;
  virtual size_t param_bytes() const = 0;
};

// Tests and benches: backward with its mean loss read back at once. Allocates and waits
// per call, so never in a training step.
inline double backward_loss(Model& model, std::span<const int32_t> targets, float grad_scale) {
  Backend& be = model.backend();
  Buffer sum = be.allocate(sizeof(double), "model:loss");
  be.fill_zero(sum.data(), sum.bytes(), be.compute_stream());
  model.backward(targets, grad_scale, sum.as<double>(), 1.0);
  double loss = 0;
  be.download(&loss, sum.data(), sizeof(double));
  return loss;
}

}  // namespace strata
