// Stage 3's working parameters: the model holds none of its own, so each unit is gathered
// from the ranks' shards into an arena before its forward and backward, released after its
// last use in the pass, and the next units are prefetched (--prefetch-depth) by replaying
// the access order recorded in the first step. Parameters below
// --param-persistence-threshold stay whole on every rank (gathered once per step). With
// hpZ (--hpz-partition-size K) each rank also keeps its 1/K slice of every unit's first
// gather of a step, and later gathers of that unit stay within the group of K ranks. With
// --offload-param the shard pieces come from the host first, through the engine's fetch.
//
// The coordinator's host thread only decides and enqueues: gathers run on the engine's
// communication stream, and the compute stream waits for a unit's gather before its use.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "model/unit_hooks.h"
#include "zero/access_order.h"
#include "zero/engine_plan.h"
#include "zero/unit_arena.h"

namespace strata::zero {

struct ZeroStats;

class ParamCoordinator {
 public:
  // Shard offsets [lo, hi) of this rank's compute-dtype parameters, from their home on the
  // host to device memory at dst, ordered on the fetch stream (--offload-param). unit: the
  // unit whose shard range it is, or -1 (the persistent slices).
  using Fetch = std::function<void(int unit, int64_t lo, int64_t hi, void* dst)>;
  // comm: null on one rank; hpz: the group's communicator (null: no secondary partition);
  // work: the stream gathers run on (own_stream: not the compute stream itself).
  ParamCoordinator(Backend& backend, const EnginePlan& plan, const ZeroOptions& options, Communicator* comm,
                   Communicator* hpz, Stream& work, bool own_stream, ZeroStats& stats);

  // Allocates the plan's stage-3 buffers. device_shard: this rank's compute shard on the
  // device (unused with a fetch); fetch and fetch_stream: with --offload-param.
  void attach(UnitModel& model, const void* device_shard, Fetch fetch, Stream* fetch_stream);

  void begin_step();
  void begin_pass();
  // The unit's parameters gathered (or already resident), the compute stream ordered after
  // the gather, and the model pointed at them; prefetches the next units in access order.
  void acquire(int unit);
  // After the step's update (the work stream drained): every gathered unit is stale.
  void end_step();
  // An evaluation between steps (forward passes only): its gathers follow an access order of
  // their own, recorded in the first evaluation and replayed (with prefetch) in later ones,
  // so the steps' order is left as it was. end_eval with the work stream drained.
  void begin_eval();
  void end_eval();
  // The persistent parameters, whole on every rank, from the updated shards.
  void publish_persistent();

  size_t persistent_bytes() const { return persistent_.bytes(); }
  size_t buffer_bytes() const { return gathered_mem_.bytes() + fetch_mem_.bytes() + persist_stage_.bytes(); }
  size_t high_water() const { return gather_arena_.high_water(); }

 private:
  struct Resident {
    int64_t offset = -1;   // in gathered_mem_ (bytes); -1: not gathered
    int pass = -1;         // the pass it was gathered for
    int64_t last_use = 0;  // order of last acquire (most-recently-used eviction)
  };
  bool low_precision() const { return plan_.compute != DType::f32; }
  void release(int unit);
  void release_all();
  bool gather_ahead(int unit, int pass, bool evict);
  void fetch_unit(int unit);
  void gather_unit_work(int unit, int64_t offset);
  // Sub-group g of the layout, padded, into padded_out: all-gathered across the ranks from
  // this rank's slice at shard + shard_off (a local copy on one rank), on the work stream.
  template <typename T>
  void gather_group(const SubGroup& g, int64_t shard_off, const T* shard, T* padded_out);
  template <typename T>
  void gather_partitioned(int g, int64_t shard_off, const T* shard, T* padded_out, bool from_secondary);

  Backend& be_;
  const EnginePlan& plan_;
  const ZeroOptions& opts_;
  Communicator* comm_;
  Communicator* hpz_;
  Stream& work_;
  bool own_stream_;
  ZeroStats& stats_;
  UnitModel* model_ = nullptr;
  const void* device_shard_ = nullptr;
  Fetch fetch_;
  Stream* fetch_stream_ = nullptr;

  Buffer persistent_;  // persistent sub-groups, whole, padded
  Buffer gathered_mem_;
  UnitArena gather_arena_;
  std::vector<Resident> resident_;
  std::vector<std::unique_ptr<Event>> gathered_;  // per unit: its gather has completed
  AccessOrder train_order_, eval_order_;
  AccessOrder* access_ = &train_order_;  // the one in use
  int current_unit_ = -1, pending_release_ = -1;
  int64_t use_clock_ = 0;
  // hpZ: the secondary partition, and per unit whether it holds this step's parameters
  // (read and written only by gather work, in stream order).
  Buffer secondary_;
  std::vector<char> secondary_valid_;
  // --offload-param: the units' shard pieces on the device, and the persistent slices.
  UnitArena fetch_arena_;
  Buffer fetch_mem_, persist_stage_;
  std::vector<int64_t> fetch_off_;  // per unit: its block in fetch_mem_ (bytes)
  std::vector<std::unique_ptr<Event>> fetched_;
  std::unique_ptr<Event> staged_;  // the persistent slices are on the device
};

}  // namespace strata::zero
