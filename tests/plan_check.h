// A run against its strata plan row: on the device, everything but the op scratch is exact,
// so the measured peak lies between the row without its scratch bound and the row; host and
// NVMe totals are exact; and each step moves the bytes between the tiers that the row says,
// as metrics.jsonl reports them. A redone speculative update (clipping, in RAM) copies its
// parameters to the device a second time, which the plan cannot foresee. NVMe reads are
// compared from step `first_n2h_step` on (a cache the run keeps fills in the first step).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "train/planner.h"
#include "train/trainer.h"

namespace strata::test {

inline void expect_run_is_plan(const PlanRow& row, const TrainResult& r, const std::string& what,
                               int64_t first_n2h_step = 1) {
  const double measured = double(r.device_high_water);
  EXPECT_GE(row.device, measured) << what << ": the plan understates the device";
  EXPECT_LE(row.device - row.scratch, measured) << what << ": the plan overstates the device";
  EXPECT_EQ(row.host, double(r.host_high_water)) << what;
  EXPECT_EQ(row.nvme, double(r.nvme_bytes)) << what;
  for (const StepRecord& s : r.steps) {
    const std::string at = what + ", step " + std::to_string(s.step);
    EXPECT_EQ(s.timeline.d2h_bytes, row.traffic.d2h) << at;
    EXPECT_EQ(s.timeline.h2n_bytes, row.traffic.h2n) << at;
    if (s.step >= first_n2h_step) {
      EXPECT_EQ(s.timeline.n2h_bytes, row.traffic.n2h) << at;
    }
    if (r.speculative_redos == 0) {
      EXPECT_EQ(s.timeline.h2d_bytes, row.traffic.h2d) << at;
    }
  }
}

}  // namespace strata::test
