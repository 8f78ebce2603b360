// Everything one training run holds, built in the order each part needs the one before:
// the --out lock, the resume point, the data, this rank's share of its node and the CPU
// split, the backend and its tiers, the ZeRO engine, the model (its weights from the
// checkpoint, a Hugging Face directory or the seed) attached to the engine, and the
// learning-rate schedule. train() (trainer.cpp) opens one, runs its step loop over it and
// reports; destruction runs in reverse (the model before the engine before the backend).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/backend.h"
#include "host/adam/adam.h"
#include "host/affinity.h"
#include "model/hf_weights.h"
#include "model/model.h"
#include "model/model_spec.h"
#include "tier/activation_offload.h"
#include "tier/tier_manager.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/loss_scaler.h"
#include "train/lr_schedule.h"
#include "train/node_share.h"
#include "train/run_lock.h"
#include "train/trainer.h"
#include "zero/zero_engine.h"

namespace strata {

class TrainingRun {
 public:
  // Collective over context.comm (the lock, the resume point, the engine).
  TrainingRun(const TrainOptions& opts, const TrainContext& context);

  const TrainOptions& opts;
  Communicator* const comm;  // the context's: null for one rank
  const std::string model_path, data_path;
  const bool hf_dir;  // a Hugging Face model directory brings its weights
  const ModelSpec spec;
  const nlohmann::json shape;  // the model's shape, as checkpoints record it
  const int rank, world;
  const bool lead;   // rank 0 reports for everyone
  const bool quiet;  // this rank prints nothing
  const RunLock lock;
  // The checkpoint at or past --steps: nothing to run, and nothing below is built.
  bool finished = false;
  std::unique_ptr<CheckpointReader> checkpoint;  // resuming from it (null: a fresh start)
  int64_t start_step = 0;                        // its step (0: fresh)
  std::unique_ptr<HfWeights> imported;           // weights from a Hugging Face directory
  std::unique_ptr<SampleSource> data;
  std::unique_ptr<SampleSource> eval_data;  // the validation set (null: none)
  std::string data_line;                    // the JSONL summary for the start-up line
  std::string eval_line;                    // the validation set's
  NodeShare share;
  host::CpuSplit split;
  int device_threads = 0, host_threads = 0;
  std::string pinned = "no";  // --pin-threads: how
  host::AdamIsa isa = host::AdamIsa::scalar;
  std::unique_ptr<Backend> backend;
  // The engine's collectives on device buffers when comm cannot reach them (NCCL over MPI
  // on GPUs); null: the engine uses comm. Counts into comm's counters.
  std::unique_ptr<Communicator> device_comm;
  std::unique_ptr<tier::TierManager> tiers;
  zero::ZeroOptions engine_options;
  std::unique_ptr<zero::ZeroEngine> engine;
  std::unique_ptr<tier::HostActivationStore> activations;  // --offload-activations cpu
  std::unique_ptr<Model> model;
  LrSchedule schedule;
  // With --lora-rank: the XXH64 of the frozen weights' f32 values in unit order, as hex;
  // checkpoints record it, and a resume over other weights is refused.
  std::string base_checksum;

  // A checkpoint after `done_steps` steps, with the step loop's state (updates applied,
  // samples consumed, the loss scaler): every rank writes its partition, rank 0 the manifest.
  void save_checkpoint(int64_t done_steps, int64_t applied, int64_t samples, const LossScaler::State& scaler);
  // What the engine trains: every weight, or with --lora-rank the adapters alone.
  int64_t trained_params() const;

 private:
  void open_device();
  void open_engine_and_model(io::IoFaults* nvme_faults);
  void open_lora_model();
  void attach_engine(UnitModel& trained, const std::vector<ParamSpec>& specs, TensorView master, TensorView compute,
                     const FlatSource* init);
  static std::vector<zero::ParamSpan> param_spans(const std::vector<ParamSpec>& specs);
  static void upload_flat(const FlatSource& src, TensorView dst, Backend& be);
  io::IoFaults* nvme_faults_ = nullptr;
};

}  // namespace strata
