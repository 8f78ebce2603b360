// A GPT-2 (pre-LN, learned positions, tied embeddings) running on any Backend: its layers
// on the Transformer skeleton (transformer.h), which owns the parameter table, the
// buffers, the hooks and the forward/backward order.
//
// Memory, all allocated once at construction from the backend's budget: f32 master
// parameters, the compute-dtype copy (16-bit runs), f32 gradients, and the activations for
// one micro-batch [B, T] with the backward scratch. Parameters are laid out unit-major
// (gpt2_unit_layout). A ZeRO engine that partitions gradients or parameters builds the
// model without those buffers (GPT2Storage) and provides each unit's storage through
// UnitHooks.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kernels/math/dropout_math.h"
#include "model/activation_store.h"
#include "model/gpt2_config.h"
#include "model/gpt2_params.h"
#include "model/model.h"
#include "model/transformer.h"
#include "model/unit_hooks.h"

namespace strata {

using GPT2Storage = ModelStorage;

class GPT2 final : public Transformer {
 public:
  GPT2(Backend& backend, GPT2Config config, int micro_batch, int seq_len, DType compute_dtype, GPT2Storage storage = {},
       UnitHooks* hooks = nullptr);
  // The activation arena's bytes for this shape (what the constructor allocates).
  static size_t activation_bytes(const GPT2Config& cfg, int micro_batch, int seq_len, DType compute_dtype,
                                 bool checkpoint, bool offload);
  using Transformer::activation_bytes;

  const GPT2Config& config() const { return cfg_; }
  std::string arch() const override { return "gpt2"; }
  std::string describe() const override;
  // Writes unit u's initial f32 parameters into dst[unit_count(u)] (what init_weights
  // writes there); each tensor draws from its own stream, so units initialise alone. GPT-2
  // initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0, norms 1.
  void init_unit(int u, uint64_t seed, float* dst) const override;

  // llm.c's order (the fixture and checkpoint format) <-> this layout; need owned buffers.
  void import_llmc_params(std::span<const float> llmc);
  void export_llmc_grads(std::span<float> llmc) const;

 private:
  struct LayerActs {
    TensorView ln1, ln1_mean, ln1_rstd, qkv, atty, lse, attproj, residual2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu,
        fcproj, residual3;
  };
  // Transformer's steps: embeddings + positions; pre-LN attention and GELU MLP blocks;
  // final layernorm and the LM head tied to the token embedding.
  void embed_forward(std::span<const int32_t> tokens) override;
  void layer_forward(int l, TensorView residual, TensorView out, bool recompute) override;
  void head_forward(TensorView last) override;
  void head_backward(TensorView last) override;
  void layer_backward(int l, TensorView residual) override;
  void embed_backward() override;
  TensorView layer_output(int l) const override { return layers_[size_t(l)].residual3; }
  // Compute-dtype / f32-gradient views of tensor p of `layer` through the unit bases.
  TensorView pv(GPT2Param p, int layer = 0) const { return param_view(entry(int(p), layer)); }
  TensorView gv(GPT2Param p, int layer = 0) const { return grad_view(entry(int(p), layer)); }
  template <typename F>
  void for_each_llmc_slice(F&& f) const;
  // Layer l's activations (the one scratch set when checkpointing).
  LayerActs& acts(int l) { return layers_[storage_.checkpoint ? 0 : size_t(l)]; }

  // Dropout at `site` (layer l: 4l+0 attention, 4l+1 attention projection, 4l+2 MLP
  // projection; the embeddings kEmbedSite), inactive outside training or at p = 0.
  static constexpr uint64_t kEmbedSite = uint64_t(1) << 32;
  DropoutSpec drop(float p, uint64_t site) const { return dropout_at(p, site); }
  // dout of a projection whose output was dropped: dresidual_ through the same mask, in `into`.
  TensorView dropped_grad(TensorView into, float p, uint64_t site);

  GPT2Config cfg_;
  TensorView lnf_, lnf_mean_, lnf_rstd_;
  TensorView dresidual_, dl_btc_, dl_bt3c_, dl_bt4c_;
  std::vector<LayerActs> layers_;
};

}  // namespace strata
