#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strata {

LossScaler::LossScaler(LossScaleConfig c)
    : c_(c),
      scale_(!c.enabled  ? 1.0
             : c.dynamic ? std::ldexp(1.0, c.initial_scale_power)
                         : c.static_scale),
      hysteresis_left_(c.hysteresis) {
  STRATA_CHECK(!c.enabled || scale_ > 0, "loss scale " + std::to_string(scale_), "the loss scale must be positive");
  STRATA_CHECK(!c.enabled || !c.dynamic || (c.window > 0 && c.hysteresis >= 1 && c.min_scale > 0),
               "dynamic loss scaling with window " + std::to_string(c.window) + ", hysteresis " +
                   std::to_string(c.hysteresis) + ", min scale " + std::to_string(c.min_scale),
               "--loss-scale-window and --hysteresis must be at least 1, --min-loss-scale positive");
}

void LossScaler::update(bool overflow) {
  if (!c_.enabled || !c_.dynamic) return;
  if (overflow) {
    if (hysteresis_left_ <= 1)
      scale_ = std::max(scale_ / 2, c_.min_scale);
    else
      --hysteresis_left_;
    last_overflow_ = iter_;
  } else if ((iter_ - last_overflow_) % c_.window == 0) {
    hysteresis_left_ = c_.hysteresis;
    scale_ *= 2;
  }
  ++iter_;
}

}  // namespace strata
