// A unit-major parameter table and the memory behind it. The table gives each tensor its
// offset in the flat layout and each unit its range (unit 0 the embedding, 1+l layer l, L+1
// the head, as UnitModel counts them). The memory is the owner's own (an f32 master, a
// compute-dtype copy in 16-bit runs, f32 gradients, as ModelStorage asks), or each unit's
// from a ZeRO engine's hooks (set_unit_params, set_unit_grads). A model's base weights and
// its low-rank adapters each keep one.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/param_spec.h"

namespace strata {

class UnitParams {
 public:
  struct Own {
    bool params = true;  // the compute parameters (f32: the master itself)
    bool master = true;  // an f32 master beside a 16-bit compute copy
    bool grads = true;   // f32 gradients
  };
  // `tag` names the buffers ("params", "lora"): "<tag>:master_f32", …
  UnitParams(Backend& backend, std::vector<ParamSpec> specs, int units, DType compute_dtype, Own own, const char* tag);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int num_units() const { return int(unit_begin_.size()) - 1; }
  int64_t num_params() const { return num_params_; }
  int64_t offset(int i) const { return offsets_[size_t(i)]; }
  int64_t unit_begin(int u) const { return unit_begin_[size_t(u)]; }
  int64_t unit_count(int u) const { return unit_begin_[size_t(u) + 1] - unit_begin_[size_t(u)]; }
  DType compute_dtype() const { return dtype_; }

  bool owns_params() const { return own_.params; }
  bool owns_master() const { return own_.params && (own_.master || dtype_ == DType::f32); }
  bool owns_grads() const { return own_.grads; }
  void set_unit_params(int u, void* base) { param_base_[size_t(u)] = base; }
  void set_unit_grads(int u, float* base) { grad_base_[size_t(u)] = base; }

  // Tensor i in the owner's master (f32), compute and gradient buffers.
  TensorView master(int i) const;
  TensorView param(int i) const;
  TensorView grad(int i) const;
  TensorView master_flat() const;
  TensorView grad_flat() const;
  TensorView compute_flat() const;  // empty in f32, where compute = master
  // Tensor i through its unit's current memory (own or the engine's); rows > 0 widens the view
  // to that many rows (adjacent tensors of one width, run as one matmul).
  TensorView param_view(int i, int64_t rows = 0) const;
  TensorView grad_view(int i, int64_t rows = 0) const;

  // The master from fill(u, dst) unit by unit on the host (UnitModel::init_unit), then the
  // compute copy.
  template <typename Fill>
  void init(Fill&& fill);
  void sync_compute();  // compute copy from the master (after every update)
  void zero_grad();
  size_t param_bytes() const { return master_.bytes() + compute_.bytes(); }
  size_t grad_bytes() const { return grads_.bytes(); }

 private:
  Backend& be_;
  std::vector<ParamSpec> specs_;
  DType dtype_;
  Own own_;
  std::vector<int64_t> offsets_, unit_begin_;
  int64_t num_params_ = 0;
  Buffer master_, compute_, grads_;
  std::vector<void*> param_base_;  // per unit
  std::vector<float*> grad_base_;  // per unit
};

template <typename Fill>
void UnitParams::init(Fill&& fill) {
  std::vector<float> unit;  // each unit made on the host, then uploaded
  for (int u = 0; u < num_units(); ++u) {
    unit.resize(size_t(unit_count(u)));
    fill(u, unit.data());
    be_.upload(master_.as<float>() + unit_begin(u), unit.data(), unit.size() * 4);
  }
  sync_compute();
}

}  // namespace strata
