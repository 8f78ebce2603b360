// Offsets carved from one fixed range: the CUDA backend takes its device memory with one
// cudaMalloc when it starts and hands out pieces of it, so no cudaMalloc (a device-wide
// synchronisation) can happen in a step. First fit over free ranges kept sorted by offset;
// a freed range merges with its neighbours. Plain host bookkeeping, tested on any machine.
#pragma once
#include <cstddef>
#include <map>

namespace strata {

class ArenaAllocator {
 public:
  static constexpr size_t kNone = ~size_t(0);
  // `alignment` must be a power of two; every offset and size is rounded up to it.
  explicit ArenaAllocator(size_t capacity, size_t alignment = 256);
  // The offset of `bytes` free bytes, or kNone when no free range is large enough.
  size_t allocate(size_t bytes);
  // Returns a range allocate() gave (with the size asked for then).
  void free(size_t offset, size_t bytes);
  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t largest_free() const;

 private:
  size_t round(size_t b) const { return (b + alignment_ - 1) & ~(alignment_ - 1); }
  size_t capacity_, alignment_, used_ = 0;
  std::map<size_t, size_t> free_;  // offset -> size
};

}  // namespace strata
