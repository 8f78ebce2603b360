// A first-fit arena over one fixed buffer, for the working copies of units (stage-3
// gathered parameters, per-unit gradient scratch). Sized once from the plan; nothing is
// allocated per step. A block can be freed at once, or once an event completes (its last
// reader is work still queued on a stream).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata::zero {

class UnitArena {
 public:
  void reset(size_t capacity_bytes, size_t max_blocks);
  size_t capacity() const { return capacity_; }
  // Offset of a free range of `bytes` (64-byte aligned), reclaiming blocks whose release
  // event has completed; -1 if none fits even then (the caller may reclaim_oldest()).
  int64_t allocate(size_t bytes);
  void release(int64_t offset);
  void release_after(int64_t offset, Event* done);
  // Blocks until the oldest pending release completes and frees it; false if none pending.
  bool reclaim_oldest();
  size_t live_bytes() const { return live_; }
  std::string describe() const;  // the blocks, for error messages
  size_t high_water() const { return high_water_; }

 private:
  struct Block {
    size_t offset, bytes;
    Event* pending;  // freed once this completes (null: in use)
    uint64_t order;  // when release_after was called (oldest first)
  };
  void erase(size_t i);
  void reclaim_ready();
  size_t capacity_ = 0, live_ = 0, high_water_ = 0;
  uint64_t clock_ = 0;
  std::vector<Block> blocks_;  // sorted by offset
};

}  // namespace strata::zero
