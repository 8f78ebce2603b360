// Warmup, then a decay from lr to lr*min_ratio at the last step: cosine (default), linear
// (DeepSpeed's WarmupDecayLR) or none (WarmupLR: constant after warmup). The warmup is
// linear (Strata's) or logarithmic (DeepSpeed's default warmup_type "log", step for step:
// DeepSpeed sets warmup_min_lr before its first update and then lr·ln(i+1)/ln(warmup) after
// update i, so step s (from 0) runs at lr·ln(max(s, 1))/ln(warmup) until s = warmup).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace strata {

struct LrSchedule {
  double lr = 1e-3;
  int64_t warmup = 0, total = 1;
  double min_ratio = 0.1;
  enum class Decay { cosine, linear, constant } decay = Decay::cosine;
  enum class Warmup { linear, log } warmup_type = Warmup::linear;

  double at(int64_t step) const {  // step counts from 0
    if (warmup_type == Warmup::log && warmup > 1 && step < warmup)
      return lr * std::log(double(std::max<int64_t>(step, 1))) / std::log(double(warmup));
    if (warmup_type == Warmup::linear && step < warmup) return lr * double(step + 1) / double(warmup);
    if (total <= warmup + 1 || decay == Decay::constant) return lr;
    const double progress = std::min(1.0, double(step - warmup) / double(total - warmup - 1));
    const double min_lr = lr * min_ratio;
    if (decay == Decay::linear) return lr + (min_lr - lr) * progress;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * progress));
  }
};

}  // namespace strata
