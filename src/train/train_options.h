// `strata train`'s options by concern. TrainOptions (trainer.h) is all of them; the option
// registry (option_registry.h) declares each field's name, default, parser and range once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/device.h"
#include "core/dtype.h"
#include "model/lora.h"
#include "train/lr_schedule.h"
#include "zero/defaults.h"
#include "zero/zero_options.h"

namespace strata {

// What is trained, in what precision, from which start.
struct ModelOptions {
  std::string model = "configs/default.json";
  std::string init = "auto";              // auto: a model directory's weights (required) | random
  DType precision = DType::f32;           // compute and gradients; the master stays f32 unless master_dtype says
  uint64_t seed = 1337;                   // weights and data order
  bool activation_checkpointing = false;  // keep layer outputs only, recompute in backward
};

// What it reads, and how much of it one step sees.
struct DataOptions {
  std::string data = "data/default.txt";
  std::string data_format = "auto";  // auto | u16 | u32 | text | jsonl (auto: .jsonl is JSONL)
  // JSONL text records: "bytes" or a sentencepiece model file; empty: the tokenizer.model
  // beside a Hugging Face --model, if any.
  std::string tokenizer;
  int micro_batch = 8;
  int grad_accum = 1;
  int seq_len = 128;
  // JSONL records packed several to a row, each attended and positioned on its own (token
  // files are windows of one stream, with no padding to remove).
  bool pack = true;
};

// Validation: a held-out part of --data or a file of its own, evaluated forward only.
struct EvalOptions {
  std::string eval_data;     // "" none (unless eval_fraction)
  double eval_fraction = 0;  // of --data held out: JSONL records, or the stream's last tokens
  int64_t eval_every = 0;    // steps between evaluations (0: only after the last step)
  int64_t eval_batches = 0;  // global batches per evaluation (0: the whole held-out set)
  bool eval_enabled() const { return !eval_data.empty() || eval_fraction > 0; }
};

// The update: AdamW, clipping, the host optimizer's state dtypes, and fp16 loss scaling.
struct OptimizerOptions {
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  bool adam_bias_correction = true;  // DeepSpeed's optimizer.params.bias_correction
  double grad_clip = 1.0;            // 0 disables clipping
  std::string adam_isa = "auto";     // auto | scalar | avx2 | avx512 (STRATA_ADAM_ISA also works)
  // The optimizer's state dtypes (f32 | bf16; a bf16 master at stages 1-3) and a 16-bit
  // state's rounding.
  DType optimizer_state_dtype = DType::f32;  // m and v
  DType master_dtype = DType::f32;
  zero::StateRounding state_rounding = zero::StateRounding::stochastic;
  // fp16 loss scaling (--precision f16): loss_scale 0 = dynamic.
  double loss_scale = 0;
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  double min_loss_scale = 1;
};

// How long the run is and the learning rate over it.
struct ScheduleOptions {
  int64_t steps = 400;
  double lr = 2e-3;
  int64_t warmup = 20;
  double min_lr_ratio = 0.1;
  LrSchedule::Decay lr_decay = LrSchedule::Decay::cosine;
  LrSchedule::Warmup warmup_type = LrSchedule::Warmup::linear;  // log: DeepSpeed's WarmupLR default
  LrSchedule lr_schedule() const { return {lr, warmup, steps, min_lr_ratio, lr_decay, warmup_type}; }
};

// Low-rank adapters (LoRA) over frozen weights, named as PEFT names them.
struct LoraOptions {
  int lora_rank = 0;  // 0: every weight is trained
  double lora_alpha = 8;
  double lora_dropout = 0;
  std::string lora_targets;  // comma-separated module names or all-linear; "": the family's PEFT default
  LoraInit lora_init = LoraInit::kaiming;
  std::string lora_adapter;  // a PEFT adapter directory the adapters start from ("": lora_init)
  bool lora() const { return lora_rank > 0; }
  LoraConfig lora_config() const;
};

// Data parallelism: the ZeRO stage, its buckets, stage 3's prefetching and partitions.
struct ZeroStageOptions {
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
  double comm_timeout = 300;  // seconds a collective may take before it is an error (CLI)
};

// The tiers below the device: host RAM and NVMe, and what moves there.
struct OffloadOptions {
  size_t host_mem = 0;  // --host-mem: the host tier's budget per rank (0: node RAM / its ranks)
  zero::OffloadTier offload_optimizer = zero::OffloadTier::none;
  zero::OffloadTier offload_param = zero::OffloadTier::none;        // stage 3; the optimizer's tier
  zero::OffloadTier offload_activations = zero::OffloadTier::none;  // cpu: the checkpoints in host RAM
  std::string nvme_path;                    // --nvme-path: directory for the per-rank swap files
  int aio_queue_depth = 32;                 // io_uring requests in flight
  size_t aio_block_size = size_t(1) << 20;  // bytes per I/O request
  bool nvme_checksum = false;               // xxHash64 per block, verified on read
  double offload_ratio = 1.0;
  zero::Speculation speculative_step = zero::Speculation::automatic;  // zero::speculative_step_for
  int pin_buffer_count = 4;
  size_t pin_buffer_size = size_t(16) << 20;
};

// The backend and the CPUs it runs on. The CPU backend has two sides: the device's threads
// (ops, communication) and the host's (CPU Adam, staging copies). 0: all CPUs for the device
// without offload; with offload, half each, but with adapters (--lora-rank) all of them for
// the device, whose host side has little to do. bind_cpus puts them on disjoint CPUs when
// they add up to no more than the rank's CPUs (the CLI does; in-process callers opt in).
struct ComputeOptions {
  DeviceChoice device = DeviceChoice::automatic;  // backend/device.h
  size_t device_mem = size_t(8) << 30;
  int threads = 0;
  bool pin_threads = false;  // pin OpenMP threads one per physical core
  int device_threads = 0;
  int host_threads = 0;
  bool bind_cpus = false;
};

// Checkpoints: OUT/checkpoints/step-N every save_every steps and after the last one.
struct CheckpointOptions {
  int64_t save_every = 0;      // 0: no checkpoints
  int keep_checkpoints = 2;    // complete checkpoints kept, newest first (0: all)
  bool resume = false;         // continue from the newest complete checkpoint in out (fresh if none)
  bool allow_changes = false;  // resume with another precision, seq_len or global batch
};

// Where the run reports: OUT (metrics.jsonl, checkpoints) and the progress line.
struct ReportingOptions {
  std::string out = "out";
  int64_t log_every = 10;
  std::string tensorboard;  // TensorBoard event files there ("" none)
  std::string csv_dir;      // DeepSpeed's CSV monitor files there ("" none)
  bool quiet = false;       // no progress line and no notes
};

}  // namespace strata
