// A Llama-family decoder (RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention,
// untied output head, no biases) on any Backend, with GPT2's memory contract: parameters
// unit-major (unit 0 the embedding, 1+l layer l, L+1 the final norm and the head), owned by
// the model or provided unit by unit through UnitHooks; one activation arena.
//
// Within a layer wq|wk|wv and w_gate|w_up are adjacent, so each pair runs as one fused
// matmul: q|k|v [B,T,(NH+2·NKV)·d] (rotary applied to q and k in place; with NKV < NH the
// kv heads are expanded for the fused attention op and their gradients summed back) and
// gate|up [B,T,2I].
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/llama_config.h"
#include "model/model.h"

namespace strata {

enum class LlamaParam { embed, attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down, norm, lm_head, count };

// The unit-major layout (ParamSpec.kind is unused: `llama_kind` says which tensor it is).
std::vector<ParamSpec> llama_unit_layout(const LlamaConfig& c);
LlamaParam llama_kind(const ParamSpec& s);

class Llama final : public Model {
 public:
  Llama(Backend& backend, LlamaConfig config, int micro_batch, int seq_len, DType compute_dtype,
        ModelStorage storage = {}, UnitHooks* hooks = nullptr);
  // The activation arena's bytes for this shape (what the constructor allocates).
  static size_t activation_bytes(const LlamaConfig& cfg, int micro_batch, int seq_len, DType compute_dtype,
                                 bool checkpoint, bool offload);

  const LlamaConfig& config() const { return cfg_; }
  std::string arch() const override { return "llama"; }
  std::string describe() const override;
  int vocab_size() const override { return cfg_.vocab_size; }
  int num_layers() const override { return cfg_.n_layer; }
  int hidden_size() const override { return cfg_.n_embd; }
  const std::vector<ParamSpec>& param_specs() const override { return specs_; }
  int64_t num_params() const override { return num_params_; }
  int64_t param_offset(int i) const override { return offsets_[size_t(i)]; }
  int num_units() const override { return cfg_.n_layer + 2; }
  int64_t unit_begin(int u) const override { return unit_begin_[size_t(u)]; }
  int64_t unit_count(int u) const override { return unit_begin_[size_t(u) + 1] - unit_begin_[size_t(u)]; }
  void set_unit_params(int u, void* base) override { param_base_[size_t(u)] = base; }
  void set_unit_grads(int u, float* base) override { grad_base_[size_t(u)] = base; }
  void init_unit(int u, uint64_t seed, float* dst) const override;
  bool owns_params() const override { return storage_.params; }
  bool owns_master() const override { return storage_.params && (storage_.master || dtype_ == DType::f32); }
  TensorView master_flat() const override;
  TensorView compute_flat() const override;
  TensorView grad_flat() const override;
  void init_weights(uint64_t seed) override;
  void sync_compute_params() override;
  void forward(std::span<const int32_t> tokens) override;
  TensorView logits() const override { return logits_; }
  void backward(std::span<const int32_t> targets, float grad_scale, double* loss_sum, double loss_weight) override;
  Backend& backend() const override { return be_; }
  void zero_grad() override;
  size_t param_bytes() const override { return master_.bytes() + compute_.bytes(); }

 private:
  struct LayerActs {
    TensorView norm1, rstd1, qkv, packed, atty, lse, attproj, residual2, norm2, rstd2, gate_up, act, down, out;
  };
  struct Slot {
    int unit;
    int64_t offset;  // elements from the unit's base
    Shape shape;
  };
  Slot slot(LlamaParam p, int layer, int64_t rows) const;
  TensorView pv(LlamaParam p, int layer = 0, int64_t rows = 0) const;  // rows > 0: a fused view
  TensorView gv(LlamaParam p, int layer = 0, int64_t rows = 0) const;
  LayerActs& acts(int l) { return layers_[storage_.checkpoint ? 0 : size_t(l)]; }
  TensorView forward_output(int l);
  TensorView backward_output(int l);
  void layer_forward(int l, LayerActs& a, TensorView residual, TensorView out, bool recompute);
  int entry(LlamaParam p, int layer) const { return entry_[size_t(p)][size_t(layer)]; }
  void acquire(int u) {
    if (hooks_) hooks_->acquire_params(u);
  }

  Backend& be_;
  LlamaConfig cfg_;
  int B_, T_;
  DType dtype_;
  ModelStorage storage_;
  UnitHooks* hooks_;
  std::vector<ParamSpec> specs_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<int>> entry_;
  std::vector<int64_t> unit_begin_;
  std::vector<void*> param_base_;
  std::vector<float*> grad_base_;
  int64_t num_params_ = 0;
  Buffer master_, compute_, grads_, act_;
  TensorView encoded_, normf_, rstdf_, logits_, losses_;
  TensorView dresidual_, dbtc_, dfused_, dpacked_, dgu_, dact_;
  std::vector<LayerActs> layers_;
  std::vector<TensorView> checkpoints_;
  std::vector<int32_t> tokens_;
};

}  // namespace strata
