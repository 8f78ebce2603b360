#include "backend/arena_allocator.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

ArenaAllocator::ArenaAllocator(size_t capacity, size_t alignment) : alignment_(alignment) {
  STRATA_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0,
               "arena alignment " + std::to_string(alignment) + " is not a power of two", "this is a bug");
  capacity_ = capacity / alignment * alignment;
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

size_t ArenaAllocator::allocate(size_t bytes) {
  const size_t need = round(std::max<size_t>(bytes, 1));
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t off = it->first, left = it->second - need;
    free_.erase(it);
    if (left > 0) free_.emplace(off + need, left);
    used_ += need;
    return off;
  }
  return kNone;
}

void ArenaAllocator::free(size_t offset, size_t bytes) {
  const size_t size = round(std::max<size_t>(bytes, 1));
  STRATA_CHECK(offset % alignment_ == 0 && offset + size <= capacity_ && size <= used_,
               "arena free of [" + std::to_string(offset) + ", +" + std::to_string(size) + ")",
               "this is a bug: the range was not allocated here");
  auto next = free_.lower_bound(offset);
  STRATA_CHECK(next == free_.end() || offset + size <= next->first, "arena double free at " + std::to_string(offset),
               "this is a bug: the range is already free");
  size_t start = offset, len = size;
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    STRATA_CHECK(prev->first + prev->second <= offset, "arena double free at " + std::to_string(offset),
                 "this is a bug: the range is already free");
    if (prev->first + prev->second == offset) start = prev->first, len += prev->second, free_.erase(prev);
  }
  if (next != free_.end() && offset + size == next->first) len += next->second, free_.erase(next);
  free_.emplace(start, len);
  used_ -= size;
}

size_t ArenaAllocator::largest_free() const {
  size_t best = 0;
  for (const auto& [off, len] : free_) best = std::max(best, len);
  return best;
}

}  // namespace strata
