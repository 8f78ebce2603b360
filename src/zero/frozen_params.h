// Weights that are not trained (the base under low-rank adapters), partitioned as stage 3
// partitions parameters: each rank keeps its shard in the compute dtype — on the device, or
// with --offload-param in host RAM or in an NVMe file — and every unit is gathered before
// its forward and backward by a ParamCoordinator of its own, with prefetch by the recorded
// access order, exactly as trained parameters are. There is no gradient, no reduction and no
// optimizer state. The weights never change, so the persistent parameters are gathered once
// and the NVMe parameter cache (the top of the shard, what the host budget holds) is read
// from the drive once for the whole run.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "io/nvme_store.h"
#include "model/unit_hooks.h"
#include "tier/tier_manager.h"
#include "zero/engine_plan.h"
#include "zero/param_coordinator.h"
#include "zero/param_fetch.h"
#include "zero/zero_stats.h"

namespace strata::zero {

class FrozenParams {
 public:
  // options: stage 3, with offload_param and nvme saying where the shard lives (nvme_options
  // the directory); comm: null on one rank; work: the stream gathers run on.
  FrozenParams(Backend& backend, Communicator* comm, const ZeroOptions& options, tier::TierManager* tiers, Stream& work,
               bool own_stream, ZeroStats& stats);
  ~FrozenParams();

  // Plans and allocates this rank's shard and the gather buffers, then fills the shard unit by
  // unit from fill(u, dst) (unit u's f32 weights, rounded once to the compute dtype).
  // embedding_in_backward: whether a backward reads unit 0 (EnginePlanInput).
  void attach(UnitModel& model, std::vector<ParamSpan> params, DType compute, bool embedding_in_backward,
              const std::function<void(int unit, float* dst)>& fill);

  const EnginePlan& plan() const { return plan_; }
  const io::NvmeFile* nvme_file() const { return file_.get(); }
  void begin_step() { coordinator_->begin_step(); }
  void begin_pass() { coordinator_->begin_pass(); }
  void acquire(int unit) { coordinator_->acquire(unit); }
  void end_step() { coordinator_->end_step(); }
  void begin_eval() { coordinator_->begin_eval(); }
  void end_eval() { coordinator_->end_eval(); }

 private:
  // Shard [lo, hi) of the compute-dtype weights between host memory and their home (host RAM
  // or the NVMe file).
  void write_home(int64_t lo, int64_t hi, const void* src);
  void read_home(int64_t lo, int64_t hi, void* dst);
  io::NvmeQueue& queue();  // the calling thread's ring on the file

  Backend& be_;
  Communicator* comm_;
  ZeroOptions opts_;
  tier::TierManager* tiers_;
  Stream& work_;
  bool own_stream_;
  ZeroStats& stats_;
  int rank_ = 0;
  EnginePlan plan_;
  Buffer device_shard_, host_shard_;
  std::unique_ptr<io::NvmeFile> file_;
  std::vector<std::pair<std::thread::id, std::unique_ptr<io::NvmeQueue>>> queues_;
  std::unique_ptr<ParamFetch> fetch_;
  std::unique_ptr<ParamCoordinator> coordinator_;
};

}  // namespace strata::zero
