#include "model/transformer.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

Transformer::Transformer(Backend& backend, TransformerDims dims, std::vector<ParamSpec> specs, int kinds,
                         int micro_batch, int seq_len, DType compute_dtype, ModelStorage storage, UnitHooks* hooks)
    : be_(backend),
      B_(micro_batch),
      T_(seq_len),
      dtype_(compute_dtype),
      storage_(storage),
      dims_(dims),
      hooks_(hooks),
      params_(backend, std::move(specs), dims.layers + 2, compute_dtype,
              {storage.params, storage.master, storage.grads}, "params") {
  STRATA_CHECK(B_ > 0 && T_ > 0, "micro-batch " + std::to_string(B_) + " × sequence " + std::to_string(T_),
               "both must be positive");
  STRATA_CHECK(
      T_ <= dims_.max_seq,
      "sequence length " + std::to_string(T_) + " exceeds the model's context " + std::to_string(dims_.max_seq),
      std::string("lower --seq-len or raise ") + dims_.context_key + " in the model config");
  STRATA_CHECK(hooks_ || (storage_.params && (storage_.grads || storage_.frozen)),
               "a model without its own parameter or gradient buffers", "pass the UnitHooks that provide them");
  STRATA_CHECK(!storage_.frozen || !storage_.grads, "frozen weights with gradient buffers",
               "a frozen model keeps no gradients");
  if (storage_.frozen) frozen_sink_ = be_.allocate(frozen_sink_bytes(params_.specs(), num_units()), "frozen:grad_sink");
  entry_.assign(size_t(kinds), std::vector<int>(size_t(std::max(dims_.layers, 1)), -1));
  for (size_t i = 0; i < params_.specs().size(); ++i) {
    const ParamSpec& s = params_.specs()[i];
    entry_[size_t(s.kind)][size_t(s.layer)] = int(i);
  }
  tokens_.reserve(size_t(B_) * size_t(T_));
  positions_.reserve(size_t(B_) * size_t(T_));
}

size_t Transformer::frozen_sink_bytes(const std::vector<ParamSpec>& layout, int units) {
  std::vector<int64_t> vectors(size_t(units), 0);  // the largest unit's vectors, widened views included
  for (const ParamSpec& p : layout)
    if (p.shape.rank == 1) vectors[size_t(p.unit)] += p.shape.numel();
  return size_t(*std::max_element(vectors.begin(), vectors.end())) * 4 + 4;
}

Buffer& Transformer::allocate_activations(size_t bytes) {
  act_ = be_.allocate(bytes, "activations");
  return act_;
}

void Transformer::init_weights(uint64_t seed) {
  STRATA_CHECK(owns_master(), "init_weights on a model without its own master parameters",
               "the ZeRO engine initialises partitioned parameters with init_unit");
  params_.init([&](int u, float* dst) { init_unit(u, seed, dst); });
}

void Transformer::sync_compute_params() { params_.sync_compute(); }

void Transformer::zero_grad() { params_.zero_grad(); }

TensorView Transformer::forward_output(int l) {
  if (!storage_.checkpoint) return layer_output(l);
  if (!storage_.offload) return checkpoints_[size_t(l)];
  return {storage_.offload->forward_slot(l), dtype_, {B_, T_, dims_.width}, Tier::device};
}

TensorView Transformer::backward_output(int l) {
  if (l < 0) return encoded_;
  if (!storage_.checkpoint) return layer_output(l);
  if (!storage_.offload) return checkpoints_[size_t(l)];
  return {const_cast<void*>(storage_.offload->backward_slot(l)), dtype_, {B_, T_, dims_.width}, Tier::device};
}

void Transformer::forward(std::span<const int32_t> tokens, std::span<const int32_t> positions) {
  evaluating_ = false;
  run_forward(tokens, positions);
}

void Transformer::evaluate(std::span<const int32_t> tokens, std::span<const int32_t> positions,
                           std::span<const int32_t> targets, double* loss_sum, double loss_weight) {
  STRATA_CHECK(targets.size() == tokens.size(), "evaluate got " + std::to_string(targets.size()) + " targets",
               "give one target per token");
  evaluating_ = true;
  run_forward(tokens, positions);
  evaluating_ = false;
  int64_t valid = 0;
  for (int32_t t : targets) valid += t >= 0;
  // The training loss's kernel, masked the same way; its gradient (dloss 0) is not used.
  be_.cross_entropy_forward_backward(losses_, logits_, targets, dims_.vocab, 0.0f, valid ? loss_sum : nullptr,
                                     double(std::max<int64_t>(valid, 1)), loss_weight, logit_softcap());
}

void Transformer::run_forward(std::span<const int32_t> tokens, std::span<const int32_t> positions) {
  const size_t BT = size_t(B_) * size_t(T_);
  STRATA_CHECK(tokens.size() == BT, "forward got " + std::to_string(tokens.size()) + " tokens",
               "expected micro-batch × seq-len = " + std::to_string(BT));
  STRATA_CHECK(positions.empty() || positions.size() == BT,
               "forward got " + std::to_string(positions.size()) + " positions",
               "give one position per token, or none");
  tokens_.assign(tokens.begin(), tokens.end());
  packed_ = !positions.empty();
  if (packed_) positions_.assign(positions.begin(), positions.end());
  const int L = dims_.layers;
  begin_pass();
  acquire(0);
  embed_forward(tokens);
  TensorView residual = encoded_;
  for (int l = 0; l < L; ++l) {
    acquire(1 + l);
    const TensorView out = forward_output(l);
    layer_forward(l, residual, out, false);
    if (storage_.offload && !evaluating_) storage_.offload->forward_done(l);
    residual = out;
  }
  acquire(L + 1);
  head_forward(residual);
}

void Transformer::backward(std::span<const int32_t> targets, float grad_scale, double* loss_sum, double loss_weight) {
  STRATA_CHECK(targets.size() == tokens_.size(), "backward got " + std::to_string(targets.size()) + " targets",
               "call forward() first with the same micro-batch size");
  int64_t valid = 0;
  for (int32_t t : targets) valid += t >= 0;
  const float dloss = valid ? grad_scale / float(valid) : 0.0f;
  be_.cross_entropy_forward_backward(losses_, logits_, targets, dims_.vocab, dloss, valid ? loss_sum : nullptr,
                                     double(std::max<int64_t>(valid, 1)), loss_weight, logit_softcap());
  const int L = dims_.layers;
  begin_pass();
  head_backward(backward_output(L - 1));
  for (int l = L - 1; l >= 0; --l) {
    const TensorView residual = backward_output(l - 1);
    open_grads(1 + l);
    acquire(1 + l);
    if (storage_.checkpoint) layer_forward(l, residual, {}, true);
    layer_backward(l, residual);
    close_grads(1 + l);
  }
  embed_backward();
}

}  // namespace strata
