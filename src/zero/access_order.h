// The order in which a step uses its units' parameters, recorded during the first step and
// replayed afterwards, so stage 3 (and parameters offloaded to host RAM or NVMe) can fetch
// ahead of use and release after the last use. A step is a sequence of passes (each forward
// and each backward of each micro-batch); within a pass a unit may be used several times
// (GPT-2's tied embedding: the encoder and the LM head).
//
// Recording starts with the first step; at its end the sequence becomes the plan. If a
// later step deviates (another unit where the plan expects one), the rest of that step
// runs on demand and is recorded again.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace strata::zero {

class AccessOrder {
 public:
  void reset(int num_units);
  void begin_step();
  void begin_pass();
  // The next use is of `unit`; returns its position in the step.
  int64_t use(int unit);
  // Ends the step: a recorded step becomes the plan.
  void end_step();

  bool replaying() const { return replaying_; }
  int64_t size() const { return int64_t(plan_unit_.size()); }
  int pass() const { return pass_; }
  // Of the plan (valid while replaying()):
  int unit_at(int64_t p) const { return plan_unit_[size_t(p)]; }
  int pass_at(int64_t p) const { return plan_pass_[size_t(p)]; }
  // Whether position p is its unit's last use in its pass.
  bool last_in_pass(int64_t p) const { return plan_last_[size_t(p)] != 0; }
  int64_t steps_replayed() const { return steps_replayed_; }
  int64_t deviations() const { return deviations_; }

 private:
  std::vector<int> plan_unit_, plan_pass_, rec_unit_, rec_pass_;
  std::vector<char> plan_last_;
  bool replaying_ = false, recording_ = true;
  int64_t pos_ = 0, steps_replayed_ = 0, deviations_ = 0;
  int pass_ = -1, num_units_ = 0;
};

}  // namespace strata::zero
