// AdamW, scalar reference (S2 replaces the inner loop with the vectorised kernel).
// Weight decay is decoupled (AdamW) and applied only where the parameter's spec says so.
#pragma once
#include <cstdint>
#include <span>

#include "backend/backend.h"

namespace strata {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
};

// One update of n elements: p -= lr * (m̂ / (sqrt(v̂) + eps) + wd * p), t is 1-based.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float grad_scale,
                  const AdamWConfig& c, float weight_decay, int64_t t);

class AdamW {
 public:
  // Optimizer states m and v (f32, zeroed) come from the backend's budget.
  AdamW(Backend& backend, int64_t num_params, AdamWConfig config);
  // Ranges [offset, offset+count) of the flat parameters and whether each decays.
  struct Group {
    int64_t offset, count;
    bool decay;
  };
  // grad_scale multiplies every gradient first (clipping); t counts steps from 1.
  void step(float* params, const float* grads, std::span<const Group> groups, float lr, float grad_scale, int64_t t);
  size_t state_bytes() const { return m_.bytes() + v_.bytes(); }
  const AdamWConfig& config() const { return cfg_; }

 private:
  AdamWConfig cfg_;
  Buffer m_, v_;
};

}  // namespace strata
