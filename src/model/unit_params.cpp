#include "model/unit_params.h"

#include <string>

#include "core/error.h"

namespace strata {

UnitParams::UnitParams(Backend& backend, std::vector<ParamSpec> specs, int units, DType compute_dtype, Own own,
                       const char* tag)
    : be_(backend), specs_(std::move(specs)), dtype_(compute_dtype), own_(own) {
  unit_begin_.assign(size_t(units) + 1, 0);
  for (const ParamSpec& s : specs_) {
    offsets_.push_back(num_params_);
    num_params_ += s.shape.numel();
    unit_begin_[size_t(s.unit) + 1] = num_params_;
  }
  for (int u = 1; u <= units; ++u)  // units without tensors end where the one before ends
    unit_begin_[size_t(u)] = std::max(unit_begin_[size_t(u)], unit_begin_[size_t(u) - 1]);
  const size_t n = size_t(num_params_);
  param_base_.assign(size_t(units), nullptr);
  grad_base_.assign(size_t(units), nullptr);
  const std::string t(tag);
  if (own_.params) {
    if (owns_master()) master_ = be_.allocate(n * 4, t + ":master_f32");
    if (dtype_ != DType::f32) compute_ = be_.allocate(n * dtype_size(dtype_), t + ":compute");
    char* base = static_cast<char*>(dtype_ == DType::f32 ? master_.data() : compute_.data());
    for (int u = 0; u < units; ++u) param_base_[size_t(u)] = base + size_t(unit_begin(u)) * dtype_size(dtype_);
  }
  if (own_.grads) {
    grads_ = be_.allocate(n * 4, t == "params" ? std::string("grads:f32") : t + ":grads_f32");
    for (int u = 0; u < units; ++u) grad_base_[size_t(u)] = grads_.as<float>() + unit_begin(u);
  }
  zero_grad();
}

TensorView UnitParams::master(int i) const {
  return master_.view(DType::f32, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * 4);
}
TensorView UnitParams::grad(int i) const {
  return grads_.view(DType::f32, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * 4);
}
TensorView UnitParams::param(int i) const {
  if (dtype_ == DType::f32) return master(i);
  return compute_.view(dtype_, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * dtype_size(dtype_));
}
TensorView UnitParams::master_flat() const { return master_.view(DType::f32, {num_params_}); }
TensorView UnitParams::grad_flat() const { return grads_.view(DType::f32, {num_params_}); }
TensorView UnitParams::compute_flat() const {
  return dtype_ == DType::f32 ? TensorView{} : compute_.view(dtype_, {num_params_});
}

// Spec s inside its unit's block at `base` (elements of `dtype`); rows > 0 widens it.
static TensorView unit_view(void* base, const ParamSpec& s, int64_t offset_in_unit, DType dtype, int64_t rows,
                            const char* what) {
  STRATA_CHECK(base, std::string(what) + " of unit " + std::to_string(s.unit) + " used before the engine provided them",
               "this is a bug in the engine's hooks");
  Shape shape = s.shape;
  if (rows > 0) shape.dims[0] = rows;
  return {static_cast<char*>(base) + size_t(offset_in_unit) * dtype_size(dtype), dtype, shape, Tier::device};
}

TensorView UnitParams::param_view(int i, int64_t rows) const {
  const ParamSpec& s = specs_[size_t(i)];
  return unit_view(param_base_[size_t(s.unit)], s, offsets_[size_t(i)] - unit_begin(s.unit), dtype_, rows,
                   "parameters");
}

TensorView UnitParams::grad_view(int i, int64_t rows) const {
  const ParamSpec& s = specs_[size_t(i)];
  return unit_view(grad_base_[size_t(s.unit)], s, offsets_[size_t(i)] - unit_begin(s.unit), DType::f32, rows,
                   "gradients");
}

void UnitParams::sync_compute() {
  if (dtype_ != DType::f32 && owns_master()) be_.cast(compute_.view(dtype_, {num_params_}), master_flat());
}

void UnitParams::zero_grad() {
  if (own_.grads) be_.fill_zero(grads_.data(), grads_.bytes(), be_.compute_stream());
}

}  // namespace strata
