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
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/math/dropout_math.h"
#include "model/lora_adapters.h"
#include "model/model.h"
#include "model/unit_params.h"

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
  const std::vector<ParamSpec>& param_specs() const override { return params_.specs(); }
  int64_t num_params() const override { return params_.num_params(); }
  int64_t param_offset(int i) const override { return params_.offset(i); }

  int num_units() const override { return dims_.layers + 2; }
  int64_t unit_begin(int u) const override { return params_.unit_begin(u); }
  int64_t unit_count(int u) const override { return params_.unit_count(u); }
  void set_unit_params(int u, void* base) override { params_.set_unit_params(u, base); }
  void set_unit_grads(int u, float* base) override { params_.set_unit_grads(u, base); }
  bool owns_params() const override { return params_.owns_params(); }
  bool owns_master() const override { return params_.owns_master(); }
  bool owns_grads() const { return params_.owns_grads(); }

  // Views of parameter i (index into param_specs()) in the model's own master (f32),
  // compute and gradient buffers; valid when the model owns them.
  TensorView master(int i) const { return params_.master(i); }
  TensorView param(int i) const { return params_.param(i); }
  TensorView grad(int i) const { return params_.grad(i); }
  TensorView master_flat() const override { return params_.master_flat(); }
  TensorView grad_flat() const override { return params_.grad_flat(); }
  // The compute-dtype copy (16-bit runs); empty in f32 runs, where compute = master.
  TensorView compute_flat() const override { return params_.compute_flat(); }
  // Each unit made on the host by init_unit, then uploaded; the compute copy follows.
  void init_weights(uint64_t seed) override;
  // Copies master weights into the compute dtype (after every optimizer step).
  void sync_compute_params() override;
  void zero_grad() override;
  size_t param_bytes() const override { return params_.param_bytes(); }
  size_t activation_bytes() const { return act_.bytes(); }
  size_t grad_bytes() const { return params_.grad_bytes(); }

  void set_dropout_rows(uint64_t seed, int64_t first_sample) override {
    drop_seed_ = seed, drop_first_ = first_sample, drop_on_ = true;
  }
  // Low-rank adapters on the linear layers `targets` name (lora.h), trained while these
  // weights stay frozen (ModelStorage::frozen). `own`: whether the adapters keep their own
  // parameters and gradients, or a ZeRO engine attached to lora() provides them.
  void attach_lora(std::vector<LoraTarget> targets, const LoraConfig& config, UnitParams::Own own);
  // The scratch a frozen model's vector gradients go to (what the constructor allocates).
  static size_t frozen_sink_bytes(const std::vector<ParamSpec>& layout, int units);
  LoraAdapters* lora() const { return lora_.get(); }
  bool frozen() const { return storage_.frozen; }

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
  TensorView param_view(int i, int64_t rows = 0) const { return params_.param_view(i, rows); }
  // Frozen weights: a matrix has no gradient (empty), and a vector's (norm gains, biases)
  // goes to a scratch the backward may add into and nothing reads.
  TensorView grad_view(int i, int64_t rows = 0) const;
  // Dropout at `site` with probability p, drawn from the rows set_dropout_rows named;
  // inactive outside training or at p = 0.
  DropoutSpec dropout_at(float p, uint64_t site) const {
    return drop_on_ && !evaluating() ? make_dropout(p, drop_seed_, site, drop_first_) : DropoutSpec{};
  }
  // The adapters of the targets inside the matmul whose rows start at table index `head`
  // (its fused rows: wq's q|k|v), on `inp` [.., in] into `out` [.., rows]: added after the base
  // matmul_forward; in backward, after the base matmul_backward wrote dinp, their weights'
  // gradients and their share of dinp.
  void lora_forward(int head, TensorView out, TensorView inp);
  // Whether an adapter sits in the matmul whose rows start at table index `head`.
  bool adapted(int head) const;
  void lora_backward(int head, TensorView dout, TensorView inp, TensorView dinp);
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
  template <typename F>
  void for_each_adapter(int head, int64_t width, TensorView inp, F&& f);
  TensorView backward_output(int l);  // layer l's output (l = -1: the embeddings)

  TransformerDims dims_;
  UnitHooks* hooks_;
  UnitParams params_;  // the table and its memory (own, or the engine's)
  std::unique_ptr<LoraAdapters> lora_;
  Buffer frozen_sink_;  // frozen: where the vectors' gradients go
  uint64_t drop_seed_ = 0;
  int64_t drop_first_ = 0;
  bool drop_on_ = false;
  std::vector<std::vector<int>> entry_;  // [kind][layer] -> index into the table
  Buffer act_;
  std::vector<int32_t> tokens_;     // the micro-batch's tokens, kept for the embedding backward
  std::vector<int32_t> positions_;  // and its packed-row positions (valid when packed_)
  bool packed_ = false, evaluating_ = false;
};

}  // namespace strata
