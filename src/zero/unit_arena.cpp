#include "zero/unit_arena.h"

#include "core/error.h"

namespace strata::zero {

void UnitArena::reset(size_t capacity_bytes, size_t max_blocks) {
  capacity_ = capacity_bytes, live_ = 0, high_water_ = 0;
  blocks_.clear();
  blocks_.reserve(max_blocks);
}

void UnitArena::erase(size_t i) {
  live_ -= blocks_[i].bytes;
  blocks_.erase(blocks_.begin() + std::ptrdiff_t(i));
}

void UnitArena::reclaim_ready() {
  for (size_t i = 0; i < blocks_.size();)
    if (blocks_[i].pending && blocks_[i].pending->ready())
      erase(i);
    else
      ++i;
}

int64_t UnitArena::allocate(size_t bytes) {
  bytes = (bytes + 63) / 64 * 64;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (attempt == 1) reclaim_ready();                   // then try once more, never reclaim without retrying
    if (blocks_.size() == blocks_.capacity()) continue;  // as many blocks as planned: reclaim first
    size_t at = 0;
    for (size_t i = 0; i <= blocks_.size(); ++i) {
      const size_t end = i < blocks_.size() ? blocks_[i].offset : capacity_;
      if (end >= at + bytes) {
        blocks_.insert(blocks_.begin() + std::ptrdiff_t(i), Block{at, bytes, nullptr, 0});
        live_ += bytes;
        high_water_ = std::max(high_water_, live_);
        return int64_t(at);
      }
      if (i < blocks_.size()) at = blocks_[i].offset + blocks_[i].bytes;
    }
  }
  return -1;
}

void UnitArena::release(int64_t offset) {
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].offset == size_t(offset)) return erase(i);
  throw_error("unit arena: release of an unknown block at " + std::to_string(offset), "this is a bug in the engine");
}

void UnitArena::release_after(int64_t offset, Event* done) {
  for (Block& b : blocks_)
    if (b.offset == size_t(offset)) {
      b.pending = done, b.order = ++clock_;
      return;
    }
  throw_error("unit arena: release of an unknown block at " + std::to_string(offset), "this is a bug in the engine");
}

std::string UnitArena::describe() const {
  std::string out;
  for (const Block& b : blocks_) {
    out += '[';
    out += std::to_string(b.offset);
    out += ", +";
    out += std::to_string(b.bytes);
    out += b.pending ? " pending]" : " in use]";
  }
  return out.empty() ? "no blocks" : out;
}

bool UnitArena::reclaim_oldest() {
  size_t best = blocks_.size();
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (blocks_[i].pending && (best == blocks_.size() || blocks_[i].order < blocks_[best].order)) best = i;
  if (best == blocks_.size()) return false;
  blocks_[best].pending->synchronize();
  erase(best);
  return true;
}

}  // namespace strata::zero
