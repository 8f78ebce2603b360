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
#include "train/lr_schedule.h"
#include "zero/defaults.h"
#include "zero/zero_options.h"

namespace strata {

class Communicator;
namespace io {
class IoFaults;
}

struct TrainOptions {
  std::string model = "configs/default.json";
  std::string data = "data/default.txt";
  std::string data_format = "auto";  // auto | u16 | u32 | text | jsonl (auto: .jsonl is JSONL)
  // JSONL text records: "bytes" or a sentencepiece model file; empty: the tokenizer.model
  // beside a Hugging Face --model, if any.
  std::string tokenizer;
  std::string init = "auto";  // auto: a model directory's weights (required) | random
  int64_t steps = 400;
  int micro_batch = 8;
  int grad_accum = 1;
  int seq_len = 128;
  double lr = 2e-3;
  int64_t warmup = 20;
  double min_lr_ratio = 0.1;
  LrSchedule::Decay lr_decay = LrSchedule::Decay::cosine;
  LrSchedule::Warmup warmup_type = LrSchedule::Warmup::linear;  // log: DeepSpeed's WarmupLR default
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  bool adam_bias_correction = true;  // DeepSpeed's optimizer.params.bias_correction
  double grad_clip = 1.0;            // 0 disables clipping
  DType precision = DType::f32;
  uint64_t seed = 1337;
  std::string out = "out";
  int64_t log_every = 10;
  int threads = 0;
  bool pin_threads = false;       // pin OpenMP threads one per physical core
  std::string adam_isa = "auto";  // auto | scalar | avx2 | avx512 (STRATA_ADAM_ISA also works)
  DeviceChoice device = DeviceChoice::automatic;  // backend/device.h
  size_t device_mem = size_t(8) << 30;
  bool quiet = false;  // no progress line (tests)
  // Data parallelism (ZeRO). Under mpirun the CLI passes an MpiComm; null = one rank.
  int zero_stage = 0;
  int64_t sub_group_size = zero::kDefaultSubGroupSize;  // elements per partitioned sub-group
  int64_t reduce_bucket_size = zero::kDefaultBucketElements;
  int64_t allgather_bucket_size = zero::kDefaultBucketElements;
  int prefetch_depth = 2;
  // Stage 3: elements to prefetch ahead (DeepSpeed's stage3_prefetch_bucket_size); > 0
  // overrides prefetch_depth with the layers that many elements hold (at least 1).
  int64_t prefetch_bucket_size = 0;
  int64_t param_persistence_threshold = zero::kDefaultPersistenceThreshold;
  int64_t max_live_params = 0;
  // Stage 3: ranks per secondary (hpZ) partition: 1 none, 0 the ranks per node.
  int hpz_partition_size = 1;
  bool overlap_comm = true;
  Communicator* comm = nullptr;
  // fp16 loss scaling (--precision f16): loss_scale 0 = dynamic.
  double loss_scale = 0;
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1;
  // Tiers and offload.
  size_t host_mem = 0;  // --host-mem: the host tier's budget per rank (0: node RAM / its ranks)
  zero::OffloadTier offload_optimizer = zero::OffloadTier::none;
  zero::OffloadTier offload_param = zero::OffloadTier::none;  // stage 3; the optimizer's tier
  std::string nvme_path;                                      // --nvme-path: directory for the per-rank swap files
  int aio_queue_depth = 32;                                   // io_uring requests in flight
  size_t aio_block_size = size_t(1) << 20;                    // bytes per I/O request
  bool nvme_checksum = false;                                 // xxHash64 per block, verified on read
  io::IoFaults* nvme_faults = nullptr;                        // test seam around the rings
  // Tests: called before each step (0-based), and with the committed parameters when a step
  // fails (what survives).
  std::function<void(int64_t)> on_step_begin;
  std::function<void(std::span<const float>)> on_step_error;
  double offload_ratio = 1.0;
  zero::Speculation speculative_step = zero::Speculation::automatic;  // zero::speculative_step_for
  // The optimizer's state dtypes (f32 | bf16; a bf16 master at stages 1-3) and a 16-bit
  // state's rounding.
  DType optimizer_state_dtype = DType::f32;  // m and v
  DType master_dtype = DType::f32;
  zero::StateRounding state_rounding = zero::StateRounding::stochastic;
  int pin_buffer_count = 4;
  size_t pin_buffer_size = size_t(16) << 20;
  // The CPU backend's two sides: the device's threads (ops, communication) and the host's
  // (CPU Adam, staging copies). 0: all CPUs for the device without offload; with offload,
  // half each. bind_cpus puts them on disjoint CPUs (the CLI does; in-process callers opt in).
  bool activation_checkpointing = false;                            // keep layer outputs only, recompute in backward
  zero::OffloadTier offload_activations = zero::OffloadTier::none;  // cpu: the checkpoints in host RAM
  int device_threads = 0;
  int host_threads = 0;
  bool bind_cpus = false;
  // Checkpoints: OUT/checkpoints/step-N every save_every steps and after the last one.
  int64_t save_every = 0;          // 0: no checkpoints
  int keep_checkpoints = 2;        // complete checkpoints kept, newest first (0: all)
  bool resume = false;             // continue from the newest complete checkpoint in out (fresh if none)
  bool allow_changes = false;      // resume with another precision, seq_len or global batch
  double comm_timeout = 300;       // seconds a collective may take before it is an error (CLI)
  bool keep_final_params = false;  // TrainResult::final_params (tests)
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
  std::vector<float> final_params;      // with keep_final_params: the f32 parameters at the end
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

// Collective over opts.comm. Takes the run lock of opts.out for its whole duration. Stops
// early, after a step every rank agrees on, when stop_signal() is set (stop_signal.h).
TrainResult train(const TrainOptions& opts);

}  // namespace strata
