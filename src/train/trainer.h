// The training loop: data -> forward/backward over micro-batches -> the ZeRO engine's
// reduction -> loss-scale check -> clip -> AdamW -> schedule, with a live progress line and
// OUT/metrics.jsonl.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/device.h"
#include "core/dtype.h"
#include "train/train_options.h"

namespace strata {

class Communicator;
namespace io {
class IoFaults;
}

// What a run is asked to do, as `strata train`'s options (train/option_registry.h) set it.
// One struct per concern (train/train_options.h); a part that needs one concern takes its
// struct alone.
struct TrainOptions : ModelOptions,
                      DataOptions,
                      EvalOptions,
                      LoraOptions,
                      OptimizerOptions,
                      ScheduleOptions,
                      ZeroStageOptions,
                      OffloadOptions,
                      ComputeOptions,
                      CheckpointOptions,
                      ReportingOptions {};

// What an in-process caller attaches to a run besides its options: the communicator, and
// the seams through which tests watch a run or break it.
struct TrainContext {
  Communicator* comm = nullptr;  // under mpirun the CLI passes an MpiComm; null: one rank
  // Called before each step (0-based).
  std::function<void(int64_t)> on_step_begin;
  // Called with the committed parameters when a step fails (what survives).
  std::function<void(std::span<const float>)> on_step_error;
  io::IoFaults* nvme_faults = nullptr;  // wraps the NVMe store's rings
  bool keep_final_params = false;       // TrainResult::final_params
};

// Where a step's time went: each engine's busy seconds (time with work in flight), the
// bytes over each tier edge, and overlap = max(busy) / wall (1.0: everything but the
// busiest engine hidden).
struct StepTimeline {
  double wall_s = 0, compute_s = 0, comm_s = 0, d2h_s = 0, h2d_s = 0, cpu_adam_s = 0, host_sum_s = 0;
  uint64_t d2h_bytes = 0, h2d_bytes = 0, h2n_bytes = 0, n2h_bytes = 0;  // host→NVMe writes, NVMe→host reads
  uint64_t comm_bytes = 0;        // bytes this rank sent in collectives (the ring volumes)
  uint64_t inter_node_bytes = 0;  // the part of comm_bytes bound for other nodes
  double overlap() const;
};

struct StepRecord {
  int64_t step;  // 1-based
  double loss, lr, grad_norm, tokens_per_s, step_ms;
  double loss_scale = 1;  // the scale this step's backward used (fp16)
  bool skipped = false;   // overflow: no update (fp16)
  StepTimeline timeline;
  double useful_tokens_per_s = 0;  // the step's targets the loss counts (not padding, not prompts), per second
  // The validation after this step (--eval-data, --eval-fraction), when one ran: the mean
  // loss over the validation targets, their count, and its seconds (not in step_ms).
  bool evaluated = false;
  double eval_loss = 0, eval_s = 0;
  int64_t eval_tokens = 0;
};

struct TrainResult {
  std::vector<StepRecord> steps;  // every step this run made (after a resume: from the checkpoint on)
  bool already_complete = false;  // --resume found a checkpoint at or past --steps: nothing ran
  int stop_signal = 0;            // SIGINT/SIGTERM stopped the run early (after a checkpoint, if saving)
  int64_t resumed_from = 0;       // the checkpoint's step (0: a fresh start)
  double seconds = 0;
  int64_t num_params = 0;
  size_t device_high_water = 0;
  size_t steady_state_allocations = 0;  // allocations after the first step (must be 0)
  std::vector<float> final_params;      // with TrainContext::keep_final_params: the f32 parameters at the end
  // This rank's model-state bytes as allocated: parameters (master and compute copies the
  // model holds, or the engine's compute shard), gradients (full or shard), optimizer
  // states (m, v and the engine's master shard).
  size_t param_bytes = 0, grad_bytes = 0, optim_bytes = 0;
  int64_t gathers_on_demand = 0, gathers_prefetched = 0;  // stage-3 unit gathers over the run
  size_t live_param_high_water = 0;                       // stage 3: bytes of gathered parameters
  size_t host_bytes = 0;                                  // this rank's host-tier bytes for offloaded states
  size_t host_high_water = 0;                             // the host tier's peak
  size_t nvme_bytes = 0;                                  // this rank's NVMe swap file
  int64_t speculative_commits = 0, speculative_redos = 0, speculative_discards = 0;
};

// Resolves a default resource path (configs/..., data/...) against the working directory,
// then the source tree the binary was built from.
std::string resolve_resource(const std::string& path);
// A model argument: a path (resolve_resource), or a named size from configs/bench (e.g.
// gpt-1.5b, scaled/gpt-170b) when no such path exists.
std::string resolve_model(const std::string& name_or_path);

// Every option's range and the combinations that cannot work; throws Error naming the option.
void validate_options(const TrainOptions& opts);

// Collective over context.comm. Takes the run lock of opts.out for its whole duration.
// Stops early, after a step every rank agrees on, when stop_signal() is set (stop_signal.h).
TrainResult train(const TrainOptions& opts, const TrainContext& context = {});

}  // namespace strata
