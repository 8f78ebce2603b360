// A Llama-family decoder (RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention;
// Llama 1-3.2, Mistral, Qwen2 and Qwen3 by their configs' options) on any Backend: its layers on the Transformer
// skeleton (transformer.h), with GPT2's memory contract: parameters unit-major (unit 0 the embedding, 1+l layer l, L+1
// the final norm and the head), owned by the model or provided unit by unit through UnitHooks; one activation arena.
//
// Within a layer wq|wk|wv and w_gate|w_up are adjacent, so each pair runs as one fused
// matmul: q|k|v [B,T,(NH+2·NKV)·d] (rotary applied to q and k in place; with NKV < NH the
// kv heads are expanded for the fused attention op and their gradients summed back) and
// gate|up [B,T,2I]. So are the q|k|v biases (Qwen2) and Qwen3's q_norm|k_norm. With tied
// embeddings the head is unit 0's embedding, gathered again as GPT-2's.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/llama_config.h"
#include "model/llama_params.h"
#include "model/model.h"
#include "model/transformer.h"

namespace strata {

class Llama final : public Transformer {
 public:
  Llama(Backend& backend, LlamaConfig config, int micro_batch, int seq_len, DType compute_dtype,
        ModelStorage storage = {}, UnitHooks* hooks = nullptr);
  // The activation arena's bytes for this shape (what the constructor allocates).
  static size_t activation_bytes(const LlamaConfig& cfg, int micro_batch, int seq_len, DType compute_dtype,
                                 bool checkpoint, bool offload);
  using Transformer::activation_bytes;

  const LlamaConfig& config() const { return cfg_; }
  std::string arch() const override { return "llama"; }
  std::string describe() const override;
  void init_unit(int u, uint64_t seed, float* dst) const override;

 private:
  struct LayerActs {
    TensorView norm1, rstd1, qkv, packed, atty, lse, attproj, residual2, norm2, rstd2, gate_up, act, down, out;
    TensorView qkv_raw, rstd_qk;  // with q/k norms: q|k|v before them, and their rstd
    TensorView prstd1, prstd2;    // with post-norms: their rstd (their inputs: attproj, down)
  };
  // Transformer's steps: the token embedding; RMSNorm, rotary GQA attention and SwiGLU
  // blocks; the final RMSNorm and the head (or the tied embedding).
  void embed_forward(std::span<const int32_t> tokens) override;
  void layer_forward(int l, TensorView residual, TensorView out, bool recompute) override;
  void head_forward(TensorView last) override;
  void head_backward(TensorView last) override;
  void layer_backward(int l, TensorView residual) override;
  void embed_backward() override;
  TensorView layer_output(int l) const override { return layers_[size_t(l)].out; }
  float logit_softcap() const override { return cfg_.final_softcap; }
  // Views of tensor p of `layer`; rows > 0 widens it to the fused wq|wk|wv or w_gate|w_up.
  TensorView pv(LlamaParam p, int layer = 0, int64_t rows = 0) const { return param_view(entry(int(p), layer), rows); }
  TensorView gv(LlamaParam p, int layer = 0, int64_t rows = 0) const { return grad_view(entry(int(p), layer), rows); }
  LayerActs& acts(int l) { return layers_[storage_.checkpoint ? 0 : size_t(l)]; }
  // The family's norm placement (LlamaConfig::norms) in the layer steps.
  TensorView pre_norm(TensorView out, TensorView rstd, TensorView x, LlamaParam weight, int l);
  void add_sublayer(TensorView out, TensorView residual, TensorView f, TensorView rstd, LlamaParam post_weight, int l);
  TensorView sublayer_grad(TensorView f, TensorView rstd, LlamaParam post_weight, int l);
  void add_input_grad(TensorView dx, TensorView x, TensorView rstd, LlamaParam weight, int l);
  float embed_scale() const;
  // q_norm|k_norm's weights: 2·head_dim per head, or the q and k widths whole.
  int64_t qk_norm_weights() const {
    return cfg_.qk_norm_whole ? cfg_.q_dim() + int64_t(cfg_.n_kv_head) * cfg_.head_dim() : 2 * int64_t(cfg_.head_dim());
  }

  LlamaConfig cfg_;
  TensorView normf_, rstdf_;
  TensorView dresidual_, dbtc_, datty_, dfused_, dpacked_, dgu_, dact_, dpost_;
  std::vector<LayerActs> layers_;
};

}  // namespace strata
