// A GPT-2 (pre-LN, learned positions, tied embeddings) running on any Backend.
//
// Memory, all allocated once at construction from the backend's budget:
//   master  f32 flat parameters (what the optimizer updates)
//   compute parameters in the compute dtype (the same buffer as master in f32 runs)
//   grads   f32 flat parameter gradients, accumulated across micro-batches
//   activations for one micro-batch [B, T] and the backward scratch.
// Parameters are laid out unit-major (gpt2_unit_layout). A ZeRO engine that partitions
// gradients or parameters builds the model without those buffers (GPT2Storage) and
// provides each unit's storage through UnitHooks.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/activation_store.h"
#include "model/gpt2_config.h"
#include "model/gpt2_params.h"
#include "model/model.h"
#include "model/unit_hooks.h"

namespace strata {

using GPT2Storage = ModelStorage;

class GPT2 final : public Model {
 public:
  GPT2(Backend& backend, GPT2Config config, int micro_batch, int seq_len, DType compute_dtype, GPT2Storage storage = {},
       UnitHooks* hooks = nullptr);
  // The activation arena's bytes for this shape (what the constructor allocates).
  static size_t activation_bytes(const GPT2Config& cfg, int micro_batch, int seq_len, DType compute_dtype,
                                 bool checkpoint, bool offload);

  const GPT2Config& config() const { return cfg_; }
  int micro_batch() const { return B_; }
  int seq_len() const { return T_; }
  DType compute_dtype() const { return dtype_; }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t num_params() const override { return num_params_; }
  std::string arch() const override { return "gpt2"; }
  std::string describe() const override;
  int vocab_size() const override { return cfg_.vocab_size; }
  int num_layers() const override { return cfg_.n_layer; }
  int hidden_size() const override { return cfg_.n_embd; }

  // Units: 0 = embeddings, 1+l = layer l, L+1 = final norm; each contiguous in the layout.
  int num_units() const override { return cfg_.n_layer + 2; }
  int64_t unit_begin(int u) const override { return unit_begin_[size_t(u)]; }
  int64_t unit_count(int u) const override { return unit_begin_[size_t(u) + 1] - unit_begin_[size_t(u)]; }
  // Where unit u's parameters (compute dtype) and gradients (f32) are, for the hooks.
  void set_unit_params(int u, void* base) override { param_base_[size_t(u)] = base; }
  void set_unit_grads(int u, float* base) override { grad_base_[size_t(u)] = base; }
  bool owns_params() const override { return storage_.params; }
  bool owns_master() const override { return storage_.params && (storage_.master || dtype_ == DType::f32); }
  bool owns_grads() const { return storage_.grads; }
  // Writes unit u's initial f32 parameters into dst[unit_count(u)] (what init_weights
  // writes there); each tensor draws from its own stream, so units initialise alone.
  void init_unit(int u, uint64_t seed, float* dst) const override;

  // llm.c's order (the fixture and checkpoint format) <-> this layout; need owned buffers.
  void import_llmc_params(std::span<const float> llmc);
  void export_llmc_grads(std::span<float> llmc) const;

  // Views of parameter i (index into param_specs()) in the master (f32), compute and grad
  // buffers; valid when the model owns them.
  TensorView master(int i) const;
  TensorView param(int i) const;
  TensorView grad(int i) const;
  TensorView master_flat() const override;
  TensorView grad_flat() const override;
  // The compute-dtype copy (bf16 runs); empty in f32 runs, where compute = master.
  TensorView compute_flat() const override;
  // Offset in elements of parameter i inside the flat buffers.
  int64_t param_offset(int i) const override { return offsets_[size_t(i)]; }

  // GPT-2 initialisation from a seed: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)),
  // biases 0, norms 1. Deterministic across runs, thread counts and layouts.
  void init_weights(uint64_t seed) override;
  // Copies master weights into the compute dtype (after every optimizer step).
  void sync_compute_params() override;

  // Forward to f32 logits [B, T, Vp]; tokens has B*T entries.
  void forward(std::span<const int32_t> tokens) override;
  TensorView logits() const override { return logits_; }
  // Fused cross-entropy (mean over non-negative targets, scaled by grad_scale) and backward,
  // accumulating into grads. Returns the mean loss of this micro-batch. Call after forward().
  void backward(std::span<const int32_t> targets, float grad_scale, double* loss_sum, double loss_weight) override;
  Backend& backend() const override { return be_; }
  void zero_grad() override;

  size_t param_bytes() const override { return master_.bytes() + compute_.bytes(); }  // f32 master + compute copy
  size_t activation_bytes() const { return act_.bytes(); }
  size_t grad_bytes() const { return grads_.bytes(); }

 private:
  struct LayerActs {
    TensorView ln1, ln1_mean, ln1_rstd, qkv, atty, lse, attproj, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
        fcproj, residual3;
  };
  // Compute-dtype / f32-gradient views of tensor p of `layer` through the unit bases.
  TensorView pv(GPT2Param p, int layer = 0) const;
  // Layer l's activations (the one scratch set when checkpointing) and its output.
  LayerActs& acts(int l) { return layers_[storage_.checkpoint ? 0 : size_t(l)]; }
  TensorView forward_output(int l);
  TensorView backward_output(int l);  // layer l's output (l = -1: the embeddings)
  void layer_forward(int l, LayerActs& a, TensorView residual, TensorView out, bool recompute);
  TensorView gv(GPT2Param p, int layer = 0) const;
  int entry(GPT2Param p, int layer) const { return entry_[size_t(p)][size_t(layer)]; }
  void acquire(int u) {
    if (hooks_) hooks_->acquire_params(u);
  }
  void begin_pass() {
    if (hooks_) hooks_->begin_pass();
  }
  void open_grads(int u) {
    if (hooks_) hooks_->open_grads(u);
  }
  void close_grads(int u) {
    if (hooks_) hooks_->close_grads(u);
  }

  Backend& be_;
  GPT2Config cfg_;
  int B_, T_;
  DType dtype_;
  GPT2Storage storage_;
  UnitHooks* hooks_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<int>> entry_;  // [kind][layer] -> index into specs_
  std::vector<int64_t> unit_begin_;      // num_units + 1 boundaries
  std::vector<void*> param_base_;        // per unit
  std::vector<float*> grad_base_;        // per unit
  int64_t num_params_ = 0;
  Buffer master_, compute_, grads_, act_;
  TensorView encoded_, lnf_, lnf_mean_, lnf_rstd_, logits_, losses_;
  TensorView dresidual_, dl_btc_, dl_bt3c_, dl_bt4c_;
  std::vector<LayerActs> layers_;
  std::vector<TensorView> checkpoints_;  // layer outputs on the device (checkpointing, no offload)
  std::vector<int32_t> tokens_;          // the micro-batch's tokens, kept for the embedding backward
};

}  // namespace strata
