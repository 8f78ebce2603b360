// Linear warmup, then a decay from lr to lr*min_ratio at the last step: cosine (default),
// linear (DeepSpeed's WarmupDecayLR) or none (WarmupLR: constant after warmup).
#pragma once
#include <cmath>
#include <cstdint>

namespace strata {

struct LrSchedule {
  double lr = 1e-3;
  int64_t warmup = 0, total = 1;
  double min_ratio = 0.1;
  enum class Decay { cosine, linear, constant } decay = Decay::cosine;

  double at(int64_t step) const {  // step counts from 0
    if (step < warmup) return lr * double(step + 1) / double(warmup);
    if (total <= warmup + 1 || decay == Decay::constant) return lr;
    const double progress = std::min(1.0, double(step - warmup) / double(total - warmup - 1));
    const double min_lr = lr * min_ratio;
    if (decay == Decay::linear) return lr + (min_lr - lr) * progress;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
  }
};

}  // namespace strata
