// The ZeRO engine: one code path for stages 0-3, driven by a policy saying what is
// partitioned across the data-parallel ranks.
//
//   stage 0: nothing; gradients all-reduced (in buckets), every rank runs the whole optimizer.
//   stage 1: optimizer states (P_os): after backward the full gradients are reduce-scattered
//            in fixed-size buckets; AdamW on this rank's shard of master, m and v; the
//            updated shards are all-gathered (in buckets) into every rank's parameters.
//   stage 2: + gradients (P_os+g): each unit's gradients go to per-unit scratch; as a unit's
//            backward ends its pieces are packed into fixed-size buckets, and each bucket
//            that is complete is reduce-scattered into this rank's gradient shard, on the
//            communication stream, while backward continues.
//   stage 3: + parameters (P_os+g+p): the model has no full parameters; each unit is
//            gathered into an arena before its forward and backward, released after its last
//            use in the pass, and the next units are prefetched (--prefetch-depth) by
//            replaying the access order recorded in the first step. Parameters smaller than
//            --param-persistence-threshold stay whole on every rank (gathered once per step).
//            With --hpz-partition-size K (ZeRO++'s hpZ), each group of K consecutive ranks
//            (a node, when K is the ranks per node) also keeps a secondary partition: after a
//            unit's first gather of a step (forward, across all ranks), each rank keeps its
//            1/K slice of it, and every later gather of that unit in the step (backward,
//            further micro-batches) is an all-gather within the group, not across nodes.
//            Memory: Ψ'/K more parameters per rank; cross-node all-gather volume: half.
//
// The model's gradients always come from the engine (UnitHooks), in the gradient dtype: f32
// in f32 runs, the compute dtype (bf16/f16) in mixed precision, as the paper counts them.
// Communication work runs on its own stream (--overlap-comm), never on the compute thread.
//
// Offload (with a TierManager): the top --offload-ratio of the shard keeps its master,
// m, v and gradient accumulator in host RAM. Each reduced bucket's host part goes
// device→host through the pinned staging pool as soon as it is reduced, is accumulated on
// the host, and — on the step's last micro-batch — updated by the CPU Adam while backward
// continues (speculatively, see host_optimizer.h), its new parameters copied back
// host→device. The rest of the shard is updated on the device after backward.
//
// The engine keeps the step's order and delegates: sizes to EnginePlan (engine_plan.h),
// gradients to GradientReducer, stage 3's parameters to ParamCoordinator, the host part of
// the optimizer to OffloadPipeline, the checkpoint state's I/O to ShardState.
#pragma once
#include <array>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/flat_source.h"
#include "model/unit_hooks.h"
#include "tier/tier_manager.h"
#include "zero/access_order.h"
#include "zero/adamw.h"
#include "zero/defaults.h"
#include "zero/device_master.h"
#include "zero/engine_plan.h"
#include "zero/frozen_params.h"
#include "zero/gradient_reducer.h"
#include "zero/host_optimizer.h"
#include "zero/offload_pipeline.h"
#include "zero/param_coordinator.h"
#include "zero/partition.h"
#include "zero/shard_state.h"
#include "zero/unit_arena.h"
#include "zero/zero_options.h"
#include "zero/zero_stats.h"

namespace strata::zero {

struct ModelBuffers {
  float* master = nullptr;  // full f32 parameters, when the model owns them
  void* compute = nullptr;  // full compute-dtype parameters when they differ from master (16-bit runs)
  DType compute_dtype = DType::f32;
  std::vector<ParamSpan> params;  // the flat parameter table, with units and weight decay
};

// What reduce_gradients agreed across ranks.
struct ReducedStep {
  double loss = 0;        // Σ over ranks of the value each passed
  double grad_norm = 0;   // global L2 norm of the (still loss-scaled) gradients
  bool overflow = false;  // some gradient on some rank was non-finite
  bool stop = false;      // some rank asked to stop after this step (a signal)
};

class ZeroEngine final : public UnitHooks {
 public:
  // comm may be null (one rank, no communication); tiers is needed to offload.
  ZeroEngine(Backend& backend, Communicator* comm, ZeroOptions options, AdamWConfig adam,
             tier::TierManager* tiers = nullptr);
  ~ZeroEngine() override;

  // What the model allocates itself. Its gradients always come from the engine's hooks.
  bool model_owns_params() const { return !policy_.parameters; }
  // Whether the model keeps a full f32 master besides its compute copy: only when nothing
  // is partitioned, or when the compute copy is the master (f32 runs).
  bool model_owns_master(DType compute) const { return !policy_.optimizer_states || compute == DType::f32; }
  UnitHooks* hooks() { return this; }
  // Builds the partition and this rank's shards. The master shard comes from
  // buffers.master when the model has one, else unit by unit from model.init_unit(seed)
  // (never the whole model at once); the model's compute copy is then filled from it.
  // With `init`, the master comes from it instead (imported weights, a checkpoint).
  void attach(UnitModel& model, ModelBuffers buffers, uint64_t seed, const FlatSource* init = nullptr);

  // Stage 3 with weights that are not trained (the base under low-rank adapters, a second
  // UnitModel in the same units as the trained one): partitions them in the compute dtype, on
  // the device or, with `offload`, in host RAM or on NVMe (`nvme`), and gathers each unit
  // before its use as the trained parameters are (FrozenParams). fill(u, dst): unit u's f32
  // weights. After attach, so that the NVMe parameter cache takes what the host budget leaves.
  struct FrozenPlacement {
    bool offload = false;               // --offload-param: the shard in host RAM (or on NVMe)
    bool nvme = false;                  // on NVMe
    bool embedding_in_backward = true;  // a backward reads unit 0 (a head tied to the embedding)
  };
  void attach_frozen(UnitModel& model, std::vector<ParamSpan> params, FrozenPlacement where,
                     const std::function<void(int unit, float* dst)>& fill);
  const FrozenParams* frozen() const { return frozen_.get(); }

  int stage() const { return opts_.stage; }
  DType grad_dtype() const { return grad_dtype_; }
  const PartitionLayout& layout() const { return plan_.layout; }
  const EnginePlan& plan() const { return plan_; }
  const ZeroStats& stats() const { return stats_; }

  void begin_step(const StepPlan& plan = {});
  // Micro-batch i of n starts (its backward is the last of the step when i == n - 1).
  void begin_micro(int i, int n);
  // Where this step's loss accumulates on the device (an f64 scalar, zeroed by begin_step):
  // the model adds each micro-batch's weighted mean loss (Model::backward).
  double* loss_sum() const;
  // After the step's backward passes: combine gradients across ranks as the stage says and
  // agree on the loss (Σ over ranks of loss_sum() plus loss_part), the global gradient
  // norm, overflow and whether any rank asks to stop, in the same reduction (no extra round
  // trip). The step's device scalars (loss, norm) are read back here, once.
  ReducedStep reduce_gradients(double loss_part = 0, bool stop = false);
  // AdamW on what this rank owns (grad_scale multiplies the gradients: clipping and loss
  // unscaling), then make every rank's parameters current (stages 0-2) or this rank's shard
  // (stage 3). t counts applied updates from 1. Non-finite gradients were caught by
  // reduce_gradients (overflow), before any update.
  void step(float lr, float grad_scale, int64_t t);
  // An overflowed step (fp16): no update; the step ends with the parameters unchanged.
  void skip_step();
  // An evaluation between steps: forward passes only (Model::evaluate), stage 3 gathering
  // in an access order of their own; no gradient, reduction or update.
  void begin_eval();
  void end_eval();
  // All f32 parameters in model-flat order (tests, export): gathered from the shards.
  void gather_full_params(std::span<float> out);
  // After a failed step: lets every stream's queued work finish, dropping their errors.
  void quiesce();

  // Checkpoints, through ShardState (shard_state.h): what this rank saves of the
  // committed optimizer state, in model-flat pieces.
  using StatePiece = zero::StatePiece;
  std::vector<StatePiece> state_pieces(int64_t max_count) const;
  // A piece's committed values, wherever they live (device, host RAM or NVMe).
  void read_state(const StatePiece& piece, float* out);
  // Restores m and v of everything this rank owns (after attach restored the master).
  void load_moments(const FlatSource& m, const FlatSource& v);

  // UnitHooks
  void begin_pass() override;
  void acquire_params(int unit) override;
  void open_grads(int unit) override;
  void close_grads(int unit) override;

  // Bytes this rank allocated, by kind. A buffer counts as the model state it holds only
  // when that state is partitioned (stage 2+ gradient shard, stage 3 parameter shard);
  // below that the same buffer is communication staging (comm_buffer_bytes).
  size_t param_bytes() const;            // stage 3: the compute shard and the persistent parameters
  size_t grad_bytes() const;             // full gradients (stages 0-1) or this rank's shard (2-3)
  size_t optimizer_state_bytes() const;  // m, v and the master shard
  size_t comm_buffer_bytes() const;      // buckets, scratch, gather arena, staging shards
  size_t host_bytes() const;             // host RAM held for offloaded states
  Stream* comm_stream() { return stream_.get(); }
  // The swap files this rank's states live in: the offloaded optimizer's, the frozen weights'
  // (null where there is none). No allocation: the step loop reads their counters every step.
  std::array<const io::NvmeFile*, 2> nvme_files() const;
  HostOptimizer* host_optimizer() { return host_.get(); }

 private:
  bool distributed() const { return comm_ && world_ > 1; }
  bool hpz() const { return hpz_comm_ != nullptr; }
  bool low_precision() const { return buf_.compute_dtype != DType::f32; }
  // The stream communication work is enqueued on: its own, or the compute stream without
  // --overlap-comm. The engine's host thread only enqueues; the backend and the
  // communicator run the work there.
  Stream& cs() { return stream_ ? *stream_ : be_.compute_stream(); }
  // Later work on cs() starts after the compute enqueued so far (a unit's backward).
  void after_compute();
  void drain();
  void finish_step();
  void wait_host();
  // Main thread.
  void publish_params();  // stages 1-2

  Backend& be_;
  Communicator* comm_;
  tier::TierManager* tiers_;
  ZeroOptions opts_;
  int rank_ = 0, world_ = 1;
  StagePolicy policy_;
  AdamWConfig adam_cfg_;
  UnitModel* model_ = nullptr;
  ModelBuffers buf_;
  DType grad_dtype_ = DType::f32;
  EnginePlan plan_;  // every buffer's size and the layout of the work (attach)
  std::unique_ptr<AdamW> adam_;
  std::vector<AdamW::Group> groups_;  // over the arrays AdamW sees
  std::unique_ptr<Stream> stream_;    // communication (null: inline)
  ZeroStats stats_;
  // The step's device scalars: [0] loss sum, [1] Σ g² of the device's gradients; read back
  // once per step into host_scalars_ (overflow is a non-finite sum).
  Buffer scalars_;
  double host_scalars_[2] = {};
  // Reused, each recorded on one stream only: compute → cs(), cs() → d2h, and cs() →
  // compute after the step's parameters are published.
  std::unique_ptr<Event> compute_done_, published_;

  // Stages 1-3: the f32 master shard (with a bf16 master, only the f32 masters beside it)
  // and the compute-dtype shard (with a bf16 master, the master).
  Buffer shard_master_, shard_compute_;
  std::unique_ptr<DeviceMaster> master_;  // the device's master read and written as f32
  // The gradients (hooks, buckets, reductions) and stage 3's working parameters.
  std::unique_ptr<GradientReducer> reducer_;
  // Stage 3: the working parameters (gathers, prefetch, release, persistence, hpZ).
  std::unique_ptr<Communicator> hpz_comm_;  // hpZ: the group's communicator
  std::unique_ptr<ParamCoordinator> params_;
  std::unique_ptr<FrozenParams> frozen_;  // stage 3's frozen weights (attach_frozen)

  // Offload: the host part [plan_.host_begin, shard) of this rank's optimizer, and the
  // pipeline that moves its chunks and runs its updates.
  std::unique_ptr<HostOptimizer> host_;
  std::unique_ptr<OffloadPipeline> offload_;
  std::unique_ptr<ShardState> state_;  // the checkpoint state's pieces and I/O
};

}  // namespace strata::zero
