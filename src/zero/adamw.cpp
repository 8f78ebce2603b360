#include "zero/adamw.h"

namespace strata {

AdamW::AdamW(Backend& backend, int64_t num_params, AdamWConfig config)
    : cfg_(config),
      m_(backend.allocate(size_t(num_params) * 4, "optim:adam_m")),
      v_(backend.allocate(size_t(num_params) * 4, "optim:adam_v")) {
  cpu::first_touch_zero(m_.as<float>(), num_params, cfg_.kernel);
  cpu::first_touch_zero(v_.as<float>(), num_params, cfg_.kernel);
}

bool AdamW::step(float* params, const void* grads, DType grad_dtype, void* compute_out, DType compute_dtype,
                 std::span<const Group> groups, float lr, float grad_scale, int64_t t) {
  bool nonfinite = false;
  const size_t out_esz = dtype_size(compute_dtype);
  for (const Group& g : groups) {
    cpu::AdamTensors ts;
    ts.param = params + g.offset;
    ts.m = m_.as<float>() + g.offset;
    ts.v = v_.as<float>() + g.offset;
    ts.grad = static_cast<const char*>(grads) + size_t(g.offset) * dtype_size(grad_dtype);
    ts.grad_dtype = grad_dtype;
    ts.param_out = compute_out ? static_cast<char*>(compute_out) + size_t(g.offset) * out_esz : nullptr;
    ts.out_dtype = compute_dtype;
    ts.n = g.count;
    const cpu::AdamHyper h{lr,   cfg_.beta1, cfg_.beta2, cfg_.eps,  g.decay ? cfg_.weight_decay : 0.0f,
                           true, true,       t,          grad_scale};
    nonfinite |= cpu::adam_step(ts, h, cfg_.kernel);
  }
  return nonfinite;
}

}  // namespace strata
