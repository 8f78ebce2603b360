#include "zero/access_order.h"

namespace strata::zero {

void AccessOrder::reset(int num_units) {
  num_units_ = num_units;
  plan_unit_.clear(), plan_pass_.clear(), plan_last_.clear();
  rec_unit_.clear(), rec_pass_.clear();
  replaying_ = false, recording_ = true;
  pos_ = 0, pass_ = -1;
}

void AccessOrder::begin_step() {
  pos_ = 0, pass_ = -1;
  recording_ = !replaying_;
  rec_unit_.clear(), rec_pass_.clear();
}

void AccessOrder::begin_pass() { ++pass_; }

int64_t AccessOrder::use(int unit) {
  const int64_t p = pos_++;
  if (replaying_ && (p >= size() || plan_unit_[size_t(p)] != unit || plan_pass_[size_t(p)] != pass_)) {
    // The step left the plan: the rest runs on demand, and this step is recorded anew
    // (its first p uses followed the plan).
    replaying_ = false, recording_ = true, ++deviations_;
    rec_unit_.assign(plan_unit_.begin(), plan_unit_.begin() + p);
    rec_pass_.assign(plan_pass_.begin(), plan_pass_.begin() + p);
  }
  if (recording_) rec_unit_.push_back(unit), rec_pass_.push_back(pass_);
  return p;
}

void AccessOrder::end_step() {
  if (replaying_ && pos_ == size()) {
    ++steps_replayed_;
    return;
  }
  if (replaying_) {  // ended early: the step had fewer uses than planned
    ++deviations_;
    rec_unit_.assign(plan_unit_.begin(), plan_unit_.begin() + pos_);
    rec_pass_.assign(plan_pass_.begin(), plan_pass_.begin() + pos_);
  }
  plan_unit_.swap(rec_unit_), plan_pass_.swap(rec_pass_);
  plan_last_.assign(plan_unit_.size(), 0);
  std::vector<int> seen_pass(size_t(num_units_), -1);  // scanning backwards: last use per pass
  for (int64_t p = size() - 1; p >= 0; --p) {
    const int u = plan_unit_[size_t(p)], ps = plan_pass_[size_t(p)];
    plan_last_[size_t(p)] = seen_pass[size_t(u)] != ps;
    seen_pass[size_t(u)] = ps;
  }
  replaying_ = true, recording_ = false;
}

}  // namespace strata::zero
