// The host optimizer's states in host RAM: each copy of master, m and v a buffer of the
// tier manager's, first-touched by the CPU Adam's threads, and the kept 16-bit parameters
// in one more. The update reads one copy and writes the other (or the same, in place).
#pragma once
#include "backend/buffer.h"
#include "host/adam/adam.h"
#include "tier/tier_manager.h"
#include "zero/state_store.h"

namespace strata::zero {

class RamStateStore final : public StateStore {
 public:
  // kernel: the CPU Adam's options, whose tile partition first-touches the states.
  RamStateStore(tier::TierManager& tm, const StoreShape& shape, const host::AdamOptions& kernel);

  size_t bytes() const override;
  void write(HostState s, int copy, int64_t lo, int64_t hi, const float* src) override;
  void read(HostState s, int copy, int64_t lo, int64_t hi, float* dst) override;
  void read_compute(int copy, int64_t lo, int64_t hi, void* dst) override;
  void finish_init(int copy) override;
  ChunkStates begin_update(const HostChunk& c, const HostChunk* next, int src, int dst) override;
  void end_update(const HostChunk&, int) override {}
  void restore(const HostChunk& c, int copy, void* out) override;

 private:
  Buffer& state(HostState s, int copy);
  char* at(HostState s, int copy, int64_t lo);  // state s of copy `copy` at shard offset lo
  ChunkPointers pointers(int copy, int64_t lo);

  Buffer master_[2], m_[2], v_[2], params_;
};

}  // namespace strata::zero
