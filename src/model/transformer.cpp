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
      specs_(std::move(specs)) {
  STRATA_CHECK(B_ > 0 && T_ > 0, "micro-batch " + std::to_string(B_) + " × sequence " + std::to_string(T_),
               "both must be positive");
  STRATA_CHECK(
      T_ <= dims_.max_seq,
      "sequence length " + std::to_string(T_) + " exceeds the model's context " + std::to_string(dims_.max_seq),
      std::string("lower --seq-len or raise ") + dims_.context_key + " in the model config");
  STRATA_CHECK(hooks_ || (storage_.params && storage_.grads), "a model without its own parameter or gradient buffers",
               "pass the UnitHooks that provide them");
  entry_.assign(size_t(kinds), std::vector<int>(size_t(std::max(dims_.layers, 1)), -1));
  unit_begin_.assign(size_t(num_units()) + 1, 0);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    offsets_.push_back(num_params_);
    entry_[size_t(s.kind)][size_t(s.layer)] = int(i);
    num_params_ += s.shape.numel();
    unit_begin_[size_t(s.unit) + 1] = num_params_;
  }
  const size_t n = size_t(num_params_);
  param_base_.assign(size_t(num_units()), nullptr);
  grad_base_.assign(size_t(num_units()), nullptr);
  if (storage_.params) {
    if (owns_master()) master_ = be_.allocate(n * 4, "params:master_f32");
    if (dtype_ != DType::f32) compute_ = be_.allocate(n * dtype_size(dtype_), "params:compute");
    char* base = static_cast<char*>(dtype_ == DType::f32 ? master_.data() : compute_.data());
    for (int u = 0; u < num_units(); ++u) param_base_[size_t(u)] = base + size_t(unit_begin(u)) * dtype_size(dtype_);
  }
  if (storage_.grads) {
    grads_ = be_.allocate(n * 4, "grads:f32");
    for (int u = 0; u < num_units(); ++u) grad_base_[size_t(u)] = grads_.as<float>() + unit_begin(u);
  }
  tokens_.reserve(size_t(B_) * size_t(T_));
  positions_.reserve(size_t(B_) * size_t(T_));
  zero_grad();
}

Buffer& Transformer::allocate_activations(size_t bytes) {
  act_ = be_.allocate(bytes, "activations");
  return act_;
}

TensorView Transformer::master(int i) const {
  return master_.view(DType::f32, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * 4);
}
TensorView Transformer::grad(int i) const {
  return grads_.view(DType::f32, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * 4);
}
TensorView Transformer::param(int i) const {
  if (dtype_ == DType::f32) return master(i);
  return compute_.view(dtype_, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * dtype_size(dtype_));
}
TensorView Transformer::master_flat() const { return master_.view(DType::f32, {num_params_}); }
TensorView Transformer::grad_flat() const { return grads_.view(DType::f32, {num_params_}); }
TensorView Transformer::compute_flat() const {
  return dtype_ == DType::f32 ? TensorView{} : compute_.view(dtype_, {num_params_});
}

// Spec i inside its unit's block at `base` (elements of `dtype`); rows > 0 widens it.
static TensorView unit_view(void* base, const ParamSpec& s, int64_t offset_in_unit, DType dtype, int64_t rows,
                            const char* what) {
  STRATA_CHECK(base, std::string(what) + " of unit " + std::to_string(s.unit) + " used before the engine provided them",
               "this is a bug in the engine's hooks");
  Shape shape = s.shape;
  if (rows > 0) shape.dims[0] = rows;
  return {static_cast<char*>(base) + size_t(offset_in_unit) * dtype_size(dtype), dtype, shape, Tier::device};
}

TensorView Transformer::param_view(int i, int64_t rows) const {
  const ParamSpec& s = specs_[size_t(i)];
  return unit_view(param_base_[size_t(s.unit)], s, offsets_[size_t(i)] - unit_begin(s.unit), dtype_, rows,
                   "parameters");
}

TensorView Transformer::grad_view(int i, int64_t rows) const {
  const ParamSpec& s = specs_[size_t(i)];
  return unit_view(grad_base_[size_t(s.unit)], s, offsets_[size_t(i)] - unit_begin(s.unit), DType::f32, rows,
                   "gradients");
}

void Transformer::init_weights(uint64_t seed) {
  STRATA_CHECK(owns_master(), "init_weights on a model without its own master parameters",
               "the ZeRO engine initialises partitioned parameters with init_unit");
  std::vector<float> unit;  // each unit made on the host, then uploaded
  for (int u = 0; u < num_units(); ++u) {
    unit.resize(size_t(unit_count(u)));
    init_unit(u, seed, unit.data());
    be_.upload(master_.as<float>() + unit_begin(u), unit.data(), unit.size() * 4);
  }
  sync_compute_params();
}

void Transformer::sync_compute_params() {
  if (dtype_ != DType::f32 && owns_master()) be_.cast(compute_.view(dtype_, {num_params_}), master_flat());
}

void Transformer::zero_grad() {
  if (storage_.grads) be_.fill_zero(grads_.data(), grads_.bytes(), be_.compute_stream());
}

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
