// What every decoder family shares, so a family (GPT-2, Llama, …) supplies only its own
// layers: the parameter table in the unit-major layout (unit 0 the embedding, 1+l layer l,
// L+1 the final norm and head), the model's own buffers or the engine's through UnitHooks,
// the activation arena and its checkpoints, and the forward/backward skeleton with every
// hook call in its place:
//
//   forward:  embed (unit 0) → layer l (unit 1+l), its output kept or checkpointed → head
//   backward: cross-entropy → head → layer l from L-1 down (recomputed when checkpointing)
//             → embed
//
// A family implements the six steps (embed_forward … embed_backward), its initialisation
// (init_unit) and the arena layout of its activations.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace strata {

// The family's dimensions the skeleton needs.
struct TransformerDims {
  int layers = 0, width = 0, vocab = 0, max_seq = 0;
  const char* context_key = "";  // the config key of max_seq, for the message
};

class Transformer : public Model {
 public:
  Backend& backend() const override { return be_; }
  int num_layers() const override { return dims_.layers; }
  int hidden_size() const override { return dims_.width; }
  int vocab_size() const override { return dims_.vocab; }
  int micro_batch() const { return B_; }
  int seq_len() const { return T_; }
  DType compute_dtype() const { return dtype_; }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t num_params() const override { return num_params_; }
  int64_t param_offset(int i) const override { return offsets_[size_t(i)]; }

  int num_units() const override { return dims_.layers + 2; }
  int64_t unit_begin(int u) const override { return unit_begin_[size_t(u)]; }
  int64_t unit_count(int u) const override { return unit_begin_[size_t(u) + 1] - unit_begin_[size_t(u)]; }
  void set_unit_params(int u, void* base) override { param_base_[size_t(u)] = base; }
  void set_unit_grads(int u, float* base) override { grad_base_[size_t(u)] = base; }
  bool owns_params() const override { return storage_.params; }
  bool owns_master() const override { return storage_.params && (storage_.master || dtype_ == DType::f32); }
  bool owns_grads() const { return storage_.grads; }

  // Views of parameter i (index into param_specs()) in the model's own master (f32),
  // compute and gradient buffers; valid when the model owns them.
  TensorView master(int i) const;
  TensorView param(int i) const;
  TensorView grad(int i) const;
  TensorView master_flat() const override;
  TensorView grad_flat() const override;
  // The compute-dtype copy (16-bit runs); empty in f32 runs, where compute = master.
  TensorView compute_flat() const override;
  // Each unit made on the host by init_unit, then uploaded; the compute copy follows.
  void init_weights(uint64_t seed) override;
  // Copies master weights into the compute dtype (after every optimizer step).
  void sync_compute_params() override;
  void zero_grad() override;
  size_t param_bytes() const override { return master_.bytes() + compute_.bytes(); }
  size_t activation_bytes() const { return act_.bytes(); }
  size_t grad_bytes() const { return grads_.bytes(); }

  // Forward to f32 logits [B, T, padded vocab]; tokens (and positions, when given) have B·T
  // entries.
  void forward(std::span<const int32_t> tokens, std::span<const int32_t> positions = {}) final;
  void evaluate(std::span<const int32_t> tokens, std::span<const int32_t> positions, std::span<const int32_t> targets,
                double* loss_sum, double loss_weight) final;
  TensorView logits() const override { return logits_; }
  void backward(std::span<const int32_t> targets, float grad_scale, double* loss_sum, double loss_weight) final;

 protected:
  // specs: the unit-major table; kinds: how many tensor kinds the family tags specs with.
  Transformer(Backend& backend, TransformerDims dims, std::vector<ParamSpec> specs, int kinds, int micro_batch,
              int seq_len, DType compute_dtype, ModelStorage storage, UnitHooks* hooks);

  // The family's steps. embed_forward writes encoded_; layer_forward writes `out` from
  // `residual` (a recompute stops where backward's inputs are complete); head_forward the
  // logits from the last layer's output. head_backward starts from the logits' gradients
  // (in logits_), opening and closing its units' gradients; layer_backward runs between
  // the skeleton's open and close of unit 1+l; embed_backward closes unit 0.
  virtual void embed_forward(std::span<const int32_t> tokens) = 0;
  virtual void layer_forward(int l, TensorView residual, TensorView out, bool recompute) = 0;
  virtual void head_forward(TensorView last) = 0;
  virtual void head_backward(TensorView last) = 0;
  virtual void layer_backward(int l, TensorView residual) = 0;
  virtual void embed_backward() = 0;
  // Layer l's output where nothing is checkpointed (in the family's activations).
  virtual TensorView layer_output(int l) const = 0;
  // The soft-cap of the logits before the loss (Gemma-2); 0: none.
  virtual float logit_softcap() const { return 0.0f; }

  // The activation arena (once, by the family's constructor) and the checkpoints in it.
  Buffer& allocate_activations(size_t bytes);
  // Spec i's parameters (compute dtype) and gradients (f32) through its unit's base; rows > 0
  // widens the view to that many rows (adjacent tensors of one width, run as one matmul).
  TensorView param_view(int i, int64_t rows = 0) const;
  TensorView grad_view(int i, int64_t rows = 0) const;
  int entry(int kind, int layer) const { return entry_[size_t(kind)][size_t(layer)]; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // The micro-batch's packed-row positions (empty: one record per row), for the ops that take them.
  std::span<const int32_t> positions() const {
    return packed_ ? std::span<const int32_t>(positions_) : std::span<const int32_t>();
  }
  // An evaluation forward is running: no dropout, nothing kept for a backward.
  bool evaluating() const { return evaluating_; }
  void acquire(int u) {
    if (hooks_) hooks_->acquire_params(u);
  }
  void open_grads(int u) {
    if (hooks_) hooks_->open_grads(u);
  }
  void close_grads(int u) {
    if (hooks_) hooks_->close_grads(u);
  }

  Backend& be_;
  const int B_, T_;
  const DType dtype_;
  const ModelStorage storage_;
  TensorView encoded_, logits_, losses_;
  std::vector<TensorView> checkpoints_;  // layer outputs on the device (checkpointing, no offload)

 private:
  void begin_pass() {
    if (hooks_) hooks_->begin_pass();
  }
  TensorView forward_output(int l);
  void run_forward(std::span<const int32_t> tokens, std::span<const int32_t> positions);
  TensorView backward_output(int l);  // layer l's output (l = -1: the embeddings)

  TransformerDims dims_;
  UnitHooks* hooks_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<int>> entry_;  // [kind][layer] -> index into specs_
  std::vector<int64_t> unit_begin_;      // num_units + 1 boundaries
  std::vector<void*> param_base_;        // per unit
  std::vector<float*> grad_base_;        // per unit
  int64_t num_params_ = 0;
  Buffer master_, compute_, grads_, act_;
  std::vector<int32_t> tokens_;     // the micro-batch's tokens, kept for the embedding backward
  std::vector<int32_t> positions_;  // and its packed-row positions (valid when packed_)
  bool packed_ = false, evaluating_ = false;
};

}  // namespace strata
