#include "model/lora_adapters.h"

#include <algorithm>
#include <cmath>

#include "core/rng.h"

namespace strata {

LoraAdapters::LoraAdapters(Backend& backend, std::vector<LoraTarget> targets, LoraConfig config, int units,
                           int64_t rows, DType compute_dtype, UnitParams::Own own)
    : cfg_(std::move(config)),
      targets_(std::move(targets)),
      params_(backend, lora_layout(targets_, cfg_.rank, true), units, compute_dtype, own, "lora"),
      rows_(rows) {
  const Widest w = widest(targets_);
  const size_t e = dtype_size(compute_dtype);
  x_ = backend.allocate(size_t(rows) * size_t(w.in) * e, "lora:x_scratch");
  dx_ = backend.allocate(size_t(rows) * size_t(w.in) * e, "lora:dx_scratch");
  y_ = backend.allocate(size_t(rows) * size_t(w.out) * e, "lora:y_scratch");
  h_ = backend.allocate(size_t(rows) * size_t(cfg_.rank) * e, "lora:h_scratch");
  dh_ = backend.allocate(size_t(rows) * size_t(cfg_.rank) * e, "lora:dh_scratch");
}

LoraAdapters::Widest LoraAdapters::widest(const std::vector<LoraTarget>& targets) {
  Widest w;
  for (const LoraTarget& t : targets) w.in = std::max(w.in, t.in), w.out = std::max(w.out, t.out);
  return w;
}

size_t LoraAdapters::device_bytes(const std::vector<LoraTarget>& targets, int rank, int64_t rows, DType compute_dtype,
                                  UnitParams::Own own) {
  int64_t n = 0;
  for (const ParamSpec& s : lora_layout(targets, rank, false)) n += s.shape.numel();
  const size_t e = dtype_size(compute_dtype);
  size_t bytes = 0;
  if (own.params && (own.master || compute_dtype == DType::f32)) bytes += size_t(n) * 4;  // lora:master_f32
  if (own.params && compute_dtype != DType::f32) bytes += size_t(n) * e;                  // lora:compute
  if (own.grads) bytes += size_t(n) * 4;
  const Widest w = widest(targets);
  return bytes + size_t(rows) * size_t(2 * w.in + w.out + 2 * rank) * e;
}

void LoraAdapters::init_unit(int u, uint64_t seed, float* dst) const {
  for (size_t i = 0; i < params_.specs().size(); ++i) {
    const ParamSpec& s = params_.specs()[i];
    if (s.unit != u) continue;
    float* p = dst + (params_.offset(int(i)) - params_.unit_begin(u));
    const int64_t n = s.shape.numel();
    if (s.kind == 1) {  // B
      std::fill(p, p + n, 0.0f);
      continue;
    }
    const int64_t in = s.shape[1];
    if (cfg_.init == LoraInit::gaussian) {
      NormalRng rng(seed ^ 0x10a4u, i);
      const float sd = 1.0f / float(cfg_.rank);
      for (int64_t k = 0; k < n; ++k) p[k] = sd * rng.next();
    } else {  // torch.nn.init.kaiming_uniform_(a=√5): bound = √(6 / ((1 + 5)·in)) = 1/√in
      Rng rng(seed ^ 0x10a4u, i);
      const double bound = 1.0 / std::sqrt(double(in));
      for (int64_t k = 0; k < n; ++k) p[k] = float((2.0 * rng.uniform() - 1.0) * bound);
    }
  }
}

}  // namespace strata
