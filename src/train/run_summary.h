// One training run in a few numbers (`strata train --summary FILE`, read by `strata bench
// suite`): throughput, achieved TFLOP/s per device and MFU, peak bytes per tier, bytes sent
// in collectives and the overlap of the step's engines, over every rank.
//
// The first step is left out of the timing (it first-touches every arena); with one step
// only, it is the timing. Achieved FLOP/s count what the step executes: the model's
// training FLOPs per token (ModelSpec::training_flops_per_token, with the recomputation
// activation checkpointing adds) times the tokens of the global batch, over the mean step
// time, divided by the ranks.
#pragma once
#include <nlohmann/json.hpp>

#include "model/model_spec.h"
#include "train/trainer.h"

namespace strata {

class Communicator;

// Collective when comm has more than one rank (every rank calls it; peaks are the maximum
// over ranks). peak_flops: the device's peak for MFU (0: unknown, mfu is null).
nlohmann::ordered_json summarize_run(const TrainOptions& opts, Communicator* comm, const TrainResult& r,
                                     const ModelSpec& spec, double peak_flops);

}  // namespace strata
