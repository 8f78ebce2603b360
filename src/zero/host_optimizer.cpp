#include "zero/host_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "cpu/convert.h"
#include "cpu/ops.h"
#include "zero/bucket_plan.h"

namespace strata::zero {

HostOptimizer::HostOptimizer(tier::TierManager& tm, int64_t begin, int64_t end, std::span<const AdamW::Group> groups,
                             AdamWConfig config, bool speculative, DType compute_dtype, bool keep_compute)
    : cfg_(config), begin_(begin), end_(end), speculative_(speculative), compute_dtype_(compute_dtype) {
  const size_t n = size_t(std::max<int64_t>(end - begin, 0));
  for (const AdamW::Group& g : groups) {
    const int64_t lo = std::max(g.offset, begin), hi = std::min(g.offset + g.count, end);
    if (hi > lo) groups_.push_back({lo - begin, hi - lo, g.decay});
  }
  const int copies = speculative ? 2 : 1;
  for (int c = 0; c < copies; ++c) {
    const std::string tag = copies > 1 ? (c ? ":b" : ":a") : "";
    master_[c] = tm.allocate(Tier::host, n * 4, "host:master" + tag);
    m_[c] = tm.allocate(Tier::host, n * 4, "host:adam_m" + tag);
    v_[c] = tm.allocate(Tier::host, n * 4, "host:adam_v" + tag);
    cpu::first_touch_zero(m_[c].as<float>(), int64_t(n), cfg_.kernel);
    cpu::first_touch_zero(v_[c].as<float>(), int64_t(n), cfg_.kernel);
    cpu::first_touch_zero(master_[c].as<float>(), int64_t(n), cfg_.kernel);
  }
  // Gradients in the run's gradient dtype (the compute dtype), accumulated with the same
  // rounding as on the device, so offloaded and device runs agree (and f16 overflow shows).
  grads_ = tm.allocate(Tier::host, n * dtype_size(compute_dtype), "host:grads");
  grads_.zero();
  if (keep_compute) {
    compute_ = tm.allocate(Tier::host, n * dtype_size(compute_dtype), "host:params_compute");
    compute_.zero();
  }
}

size_t HostOptimizer::bytes() const {
  size_t b = grads_.bytes() + compute_.bytes();
  for (int c = 0; c < 2; ++c) b += master_[c].bytes() + m_[c].bytes() + v_[c].bytes();
  return b;
}

void HostOptimizer::finish_init() {
  const size_t n = size_t(end_ - begin_);
  if (compute_.data()) cpu::convert_parallel(compute_.data(), compute_dtype_, master_[cur_].data(), DType::f32, n);
}

double HostOptimizer::accumulate(const HostChunk& c, const float* g, bool first) {
  const size_t esz = dtype_size(compute_dtype_);
  char* acc = static_cast<char*>(grads_.data()) + size_t(c.lo - begin_) * esz;
  accumulate_into(acc, compute_dtype_, g, c.hi - c.lo, !first);
  return sum_squares_serial(acc, compute_dtype_, c.hi - c.lo);
}

bool HostOptimizer::update(const HostChunk& c, float lr, float grad_scale, int64_t t, void* out) {
  const int src = cur_, dst = speculative_ ? 1 - cur_ : cur_;
  const int64_t lo = c.lo - begin_, hi = c.hi - begin_;
  const size_t esz = dtype_size(compute_dtype_);
  bool nonfinite = false;
  for (const AdamW::Group& g : groups_) {
    const int64_t a = std::max(g.offset, lo), b = std::min(g.offset + g.count, hi);
    if (b <= a) continue;
    cpu::AdamTensors ts;
    ts.param = master_[dst].as<float>() + a;
    ts.m = m_[dst].as<float>() + a;
    ts.v = v_[dst].as<float>() + a;
    ts.param_in = master_[src].as<float>() + a;
    ts.m_in = m_[src].as<float>() + a;
    ts.v_in = v_[src].as<float>() + a;
    ts.grad = static_cast<const char*>(grads_.data()) + size_t(a) * esz;
    ts.grad_dtype = compute_dtype_;
    ts.n = b - a;
    if (compute_dtype_ != DType::f32) {
      ts.out_dtype = compute_dtype_;
      ts.param_out = compute_.data() ? static_cast<char*>(compute_.data()) + size_t(a) * esz
                                     : (out ? static_cast<char*>(out) + size_t(a - lo) * esz : nullptr);
    }
    const cpu::AdamHyper h{lr,   cfg_.beta1, cfg_.beta2, cfg_.eps,  g.decay ? cfg_.weight_decay : 0.0f,
                           true, true,       t,          grad_scale};
    nonfinite |= cpu::adam_step(ts, h, cfg_.kernel);
  }
  // Padding is in no group: it stays zero in both copies (zeroed at start, never written).
  if (out && compute_.data())
    std::memcpy(out, static_cast<const char*>(compute_.data()) + size_t(lo) * esz, size_t(hi - lo) * esz);
  else if (out && compute_dtype_ == DType::f32)
    std::memcpy(out, master_[dst].as<float>() + lo, size_t(hi - lo) * 4);
  return nonfinite;
}

void HostOptimizer::commit() {
  if (speculative_) cur_ = 1 - cur_;
}

void HostOptimizer::restore(const HostChunk& c, void* out) {
  const int64_t lo = c.lo - begin_, n = c.hi - c.lo;
  const float* m = master_[cur_].as<float>() + lo;
  if (compute_.data()) {
    char* dst = static_cast<char*>(compute_.data()) + size_t(lo) * dtype_size(compute_dtype_);
    cpu::convert_from_f32(dst, compute_dtype_, m, size_t(n));
    if (out) std::memcpy(out, dst, size_t(n) * dtype_size(compute_dtype_));
  } else if (out) {
    cpu::convert_from_f32(out, compute_dtype_, m, size_t(n));
  }
}

}  // namespace strata::zero
