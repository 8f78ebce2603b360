#include "train/adamw.h"

#include <cmath>
#include <cstring>

namespace strata {

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float grad_scale,
                  const AdamWConfig& c, float weight_decay, int64_t t) {
  const float bc1 = 1.0f - std::pow(c.beta1, float(t)), bc2 = 1.0f - std::pow(c.beta2, float(t));
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * grad_scale;
    m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * gi;
    v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * gi * gi;
    const float mh = m[i] / bc1, vh = v[i] / bc2;
    p[i] -= lr * (mh / (std::sqrt(vh) + c.eps) + weight_decay * p[i]);
  }
}

AdamW::AdamW(Backend& backend, int64_t num_params, AdamWConfig config)
    : cfg_(config),
      m_(backend.allocate(size_t(num_params) * 4, "optim:adam_m")),
      v_(backend.allocate(size_t(num_params) * 4, "optim:adam_v")) {
  std::memset(m_.data(), 0, m_.bytes());
  std::memset(v_.data(), 0, v_.bytes());
}

void AdamW::step(float* params, const float* grads, std::span<const Group> groups, float lr, float grad_scale,
                 int64_t t) {
  for (const Group& gr : groups)
    adamw_update(params + gr.offset, grads + gr.offset, m_.as<float>() + gr.offset, v_.as<float>() + gr.offset,
                 gr.count, lr, grad_scale, cfg_, gr.decay ? cfg_.weight_decay : 0.0f, t);
}

}  // namespace strata
