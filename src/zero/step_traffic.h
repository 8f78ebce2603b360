// The bytes one training step moves over each tier edge on this rank, computed from
// the engine's plan: what `strata plan` states per row and what metrics.jsonl reports per
// step (tests hold the two equal), with the least the drive must carry for the same
// options and host budget beside it.
#pragma once
#include <cstdint>

#include "zero/engine_plan.h"

namespace strata::zero {

struct StepTraffic {
  // device→host, host→device, NVMe→host, host→NVMe: what the engine moves in a step.
  uint64_t d2h = 0, h2d = 0, n2h = 0, h2n = 0;
  // The least each edge must carry for the same options and host budget.
  // - d2h: each micro-batch's gradients in their own dtype (the engine sends the reduced f32:
  //   the host adds each micro-batch to its 16-bit sum with the device's rounding).
  // - h2d: the updated parameters once, or with --offload-param each pass's unit parameters
  //   (the device keeps none between passes) and the persistent ones once: what it moves.
  // - n2h, h2n: master, m and v read and written once (12 B each way); with parameters on
  //   NVMe their 16-bit copy written once and read once, plus, in every later pass, what
  //   the host budget cannot keep between passes.
  uint64_t min_d2h = 0, min_h2d = 0, min_n2h = 0, min_h2n = 0;
};

// A frozen plan (EnginePlan::frozen) moves only its fetches: h2d and, on NVMe, n2h.
// micro_batches: --grad-accum. A step whose speculative update (if any) stands: a redo
// after clipping adds a second update's bytes, which --speculative-step auto avoids on NVMe.
StepTraffic step_traffic(const EnginePlan& plan, int micro_batches);

}  // namespace strata::zero
