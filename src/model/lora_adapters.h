// A model's low-rank adapters (lora.h): their table and memory (UnitParams, in the same units
// as the model, so one ZeRO engine's hooks serve both), their initialisation, and the
// scratch an adapted matmul needs. The model applies them (Transformer::lora_forward); a
// ZeRO engine trains them as it trains any UnitModel, while the base weights stay frozen.
#pragma once
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/lora.h"
#include "model/unit_hooks.h"
#include "model/unit_params.h"

namespace strata {

class LoraAdapters final : public UnitModel {
 public:
  // rows: tokens per micro-batch (B·T), which sizes the scratch.
  LoraAdapters(Backend& backend, std::vector<LoraTarget> targets, LoraConfig config, int units, int64_t rows,
               DType compute_dtype, UnitParams::Own own);

  // What the constructor allocates on the device (strata plan sizes runs with it).
  static size_t device_bytes(const std::vector<LoraTarget>& targets, int rank, int64_t rows, DType compute_dtype,
                             UnitParams::Own own);

  const LoraConfig& config() const { return cfg_; }
  const std::vector<LoraTarget>& targets() const { return targets_; }
  UnitParams& params() { return params_; }
  const UnitParams& params() const { return params_; }
  // Target t's A [r, in] and B [out, r], and their gradients, through the unit's memory.
  TensorView a(int t) const { return params_.param_view(2 * t); }
  TensorView b(int t) const { return params_.param_view(2 * t + 1); }
  TensorView da(int t) const { return params_.grad_view(2 * t); }
  TensorView db(int t) const { return params_.grad_view(2 * t + 1); }

  // Scratch of the compute dtype: [rows, w] views (w up to the widest target's in or out).
  TensorView x_scratch(int64_t w) const { return view(x_, w); }    // dropout(x)
  TensorView dx_scratch(int64_t w) const { return view(dx_, w); }  // the adapter's share of dx
  TensorView y_scratch(int64_t w) const { return view(y_, w); }    // B's output, or its gradient
  TensorView h_scratch() const { return view(h_, cfg_.rank); }     // A's output
  TensorView dh_scratch() const { return view(dh_, cfg_.rank); }   // its gradient

  // UnitModel
  int num_units() const override { return params_.num_units(); }
  int64_t unit_begin(int u) const override { return params_.unit_begin(u); }
  int64_t unit_count(int u) const override { return params_.unit_count(u); }
  void set_unit_params(int u, void* base) override { params_.set_unit_params(u, base); }
  void set_unit_grads(int u, float* base) override { params_.set_unit_grads(u, base); }
  // A as PEFT initialises it (Kaiming-uniform with a = √5: U(±1/√in); or N(0, 1/r)), B zero,
  // each tensor from its own stream of the seed.
  void init_unit(int u, uint64_t seed, float* dst) const override;

 private:
  struct Widest {
    int64_t in = 1, out = 1;
  };
  static Widest widest(const std::vector<LoraTarget>& targets);
  TensorView view(const Buffer& b, int64_t w) const { return b.view(params_.compute_dtype(), {rows_, w}); }
  LoraConfig cfg_;
  std::vector<LoraTarget> targets_;
  UnitParams params_;
  int64_t rows_;
  Buffer x_, dx_, y_, h_, dh_;
};

}  // namespace strata
