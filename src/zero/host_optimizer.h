// The host side of an offloaded optimizer (--offload-optimizer cpu or nvme): this
// rank's master, m and v for shard offsets [begin, end), with the gradient accumulator
// (in the run's gradient dtype, always in host RAM), updated chunk by chunk by the CPU Adam
// on the host stream. The states are f32, or (StateFormat) m and v and/or the master in
// bf16: the interface below stays f32 (widened on reads, rounded to nearest on writes, which
// gives back a widened bf16 exactly), so checkpoints (which store each state in its dtype),
// export and resharding see f32 states. Beside a bf16 master, the groups without weight
// decay (norm gains, biases) keep an f32 master in RAM, whatever the tier
// (StateFormat::master_of); the bf16 master holds their rounding to nearest.
//
// Where the states live is a StateStore chosen once: host RAM (RamStateStore) or an NVMe
// swap file (NvmeStateStore).
//
// Speculative steps (the default) are this class's policy: the update of a chunk runs as
// soon as its gradients are complete, during backward, before the global norm is known. It
// reads the committed copy and writes the other, so the committed state stays intact:
// commit() flips the copies; when clipping or an overflow says the speculation was wrong,
// the step recomputes from the committed copy (clipping) or keeps it (overflow). In RAM
// this costs a second copy of master, m and v and no extra memory traffic (the kernel reads
// one copy and writes the other in the same pass). Without speculation there is one copy in
// RAM, updated in place after the norm is known; on NVMe there are always two, so that a
// failed write never leaves a partial step behind.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "io/nvme_store.h"
#include "tier/tier_manager.h"
#include "zero/adamw.h"
#include "zero/host_optimizer_sizes.h"
#include "zero/state_store.h"
#include "zero/zero_options.h"

namespace strata::zero {

// What a HostOptimizer is made from: the engine plan's decisions for this rank.
struct HostOptimizerPlan {
  int64_t begin = 0, end = 0;  // the shard offsets it owns
  // AdamW groups in shard offsets (the owned pieces, with weight decay), of which the parts
  // in [begin, end) are this optimizer's.
  std::span<const AdamW::Group> groups;
  AdamWConfig config;
  bool speculative = true;
  DType compute_dtype = DType::f32;
  bool keep_compute = false;              // the 16-bit parameters are kept here too (stage-3 parameter offload)
  const io::NvmeOptions* nvme = nullptr;  // where the states live (null: RAM)
  int rank = 0;                           // names the swap file
  int64_t chunk_elements = 0;             // bounds a chunk (the NVMe swap slots' size)
  StateFormat format;                     // the states' dtypes
  // Room for the f32 masters of groups without weight decay when the master is bf16 (the
  // plan's count, the most of any rank; at least this optimizer's).
  int64_t f32_master_room = 0;
};

class HostOptimizer {
 public:
  HostOptimizer(tier::TierManager& tm, const HostOptimizerPlan& plan);
  ~HostOptimizer();

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool speculative() const { return speculative_; }
  size_t bytes() const;  // host RAM held
  const io::NvmeFile* nvme_file() const { return store_->nvme_file(); }
  void set_faults(io::IoFaults* f) { store_->set_faults(f); }

  // The committed master of [lo, hi) (shard offsets): written at start-up, read back for
  // export and for mirrors. With NVMe, lo and hi are multiples of the alignment.
  void write_master(int64_t lo, int64_t hi, const float* src) { write_state(HostState::master, lo, hi, src); }
  void read_master(int64_t lo, int64_t hi, float* dst) { read_committed(HostState::master, lo, hi, dst); }
  // The same for any committed state of master, m and v (checkpoints). With NVMe, lo must be
  // a multiple of the alignment (hi may be anything up to end()).
  void write_state(HostState s, int64_t lo, int64_t hi, const float* src);
  void read_committed(HostState s, int64_t lo, int64_t hi, float* dst);
  int64_t alignment() const { return store_->alignment(); }  // elements: what lo must be a multiple of
  const StateFormat& format() const { return fmt_; }
  // The committed parameters of [lo, hi) in the compute dtype (f32 runs: the master).
  void read_compute(int64_t lo, int64_t hi, void* dst) { store_->read_compute(cur_, lo, hi, dst); }
  // After the master is written: derives the kept 16-bit parameters from it.
  void finish_init() { store_->finish_init(cur_); }

  // grads[lo, hi) (+)= g (rounded to the gradient dtype, as on the device); returns Σ g²
  // of the accumulated chunk (the norm's host part).
  double accumulate(const HostChunk& c, const float* g, bool first);
  // AdamW on the chunk with the accumulated gradients: speculative → writes the other copy,
  // else in place. The updated parameters go to `out` (compute dtype, chunk-relative) when
  // given, and to the kept parameters. Chunks must come in ascending index order (the NVMe
  // prefetch reads the next). Returns true on a non-finite gradient.
  bool update(const HostChunk& c, const HostChunk* next, float lr, float grad_scale, int64_t t, void* out);
  // Writes the committed parameters of the chunk in the compute dtype to out (and restores
  // kept RAM parameters): undoes a speculative copy-out after an overflow.
  void restore(const HostChunk& c, void* out) { store_->restore(c, cur_, out); }
  // Waits for every write this thread issued (before the step commits).
  void flush() { store_->flush(); }
  // The speculative copy becomes the committed one.
  void commit();

 private:
  // A chunk's states and the f32 masters of the same copy (all of them: indexed by f32_at_).
  struct States {
    ChunkPointers p;
    float* f32_master;
  };
  float* f32_masters(int copy) { return f32_master_[copy].as<float>(); }
  // The committed f32 masters within shard offsets [lo, hi): set from values[i - lo], or
  // written over them (write_state and read_committed of the master).
  void store_f32_masters(int64_t lo, int64_t hi, const float* values);
  void load_f32_masters(int64_t lo, int64_t hi, float* values) const;
  // Calls f(k, a, b) for each group k with an f32 master and its overlap [a, b) with [lo, hi).
  template <typename F>
  void each_f32_master(int64_t lo, int64_t hi, F&& f) const;
  bool adam(States out_state, States in_state, int64_t lo, int64_t hi, float lr, float grad_scale, int64_t t,
            void* out);

  AdamWConfig cfg_;
  StateFormat fmt_;
  int64_t begin_, end_;
  bool speculative_;
  DType compute_dtype_;
  std::vector<AdamW::Group> groups_;  // clipped to [begin, end), offsets relative to begin
  HostOptimizerSizes sizes_;
  Buffer grads_;
  // With a bf16 master, the groups without weight decay keep an f32 master here (in
  // RAM, whatever the tier: a few per mille of the elements); f32_at_[k] is group k's first
  // element in it (-1: none). The bf16 master holds its rounding to nearest, the compute copy.
  std::vector<int64_t> f32_at_;
  Buffer f32_master_[2];
  int cur_ = 0;  // the committed copy
  bool two_copies_ = false;
  std::unique_ptr<StateStore> store_;
};

}  // namespace strata::zero
