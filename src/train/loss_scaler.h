// fp16 loss scaling, with DeepSpeed's dynamic policy (fp16/loss_scaler.py) so configs carry
// over: the loss is multiplied by `scale` before backward; a step whose gradients overflow
// (agreed across ranks by the engine) is skipped; after `hysteresis` overflows in a row the
// scale is divided by 2 (never below `min_scale`), and after `window` steps without overflow
// it is doubled. A static scale (dynamic = false) never changes, but still skips overflows.
#pragma once
#include <cstdint>

namespace strata {

struct LossScaleConfig {
  bool enabled = false;     // fp16 runs
  bool dynamic = true;      // false: the fixed `static_scale`
  double static_scale = 1;  // --loss-scale > 0
  int initial_scale_power = 16;
  int64_t window = 1000;
  int hysteresis = 2;
  double min_scale = 1;
};

class LossScaler {
 public:
  explicit LossScaler(LossScaleConfig c);
  double scale() const { return scale_; }
  // After each step (skipped or not): overflow says whether its gradients overflowed.
  void update(bool overflow);
  // Everything update() depends on, for checkpoints.
  struct State {
    double scale;
    int hysteresis_left;
    int64_t iter, last_overflow;
  };
  State state() const { return {scale_, hysteresis_left_, iter_, last_overflow_}; }
  void restore(const State& s) {
    scale_ = s.scale, hysteresis_left_ = s.hysteresis_left, iter_ = s.iter, last_overflow_ = s.last_overflow;
  }

 private:
  LossScaleConfig c_;
  double scale_;
  int hysteresis_left_;
  int64_t iter_ = 0, last_overflow_ = -1;
};

}  // namespace strata
