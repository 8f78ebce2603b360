#include "zero/ram_state_store.h"

#include <cstring>

#include "core/error.h"
#include "host/convert.h"

namespace strata::zero {

namespace {

// Zero-fills a state buffer with the CPU Adam's tile partition (first touch by the thread
// that streams it); an odd count of 16-bit elements is zeroed plainly.
void touch_state(Buffer& b, const host::AdamOptions& o) {
  if (b.bytes() % 4 == 0)
    host::first_touch_zero(b.as<float>(), int64_t(b.bytes() / 4), o);
  else
    b.zero();
}

}  // namespace

RamStateStore::RamStateStore(tier::TierManager& tm, const StoreShape& shape, const host::AdamOptions& kernel)
    : StateStore(shape) {
  const size_t n = size_t(std::max<int64_t>(shape.elements(), 0));
  for (int c = 0; c < shape.copies; ++c) {
    const std::string tag = shape.copies > 1 ? (c ? ":b" : ":a") : "";
    master_[c] = tm.allocate(Tier::host, n * shape.size(HostState::master), "host:master" + tag);
    m_[c] = tm.allocate(Tier::host, n * shape.size(HostState::m), "host:adam_m" + tag);
    v_[c] = tm.allocate(Tier::host, n * shape.size(HostState::v), "host:adam_v" + tag);
    for (Buffer* b : {&m_[c], &v_[c], &master_[c]}) touch_state(*b, kernel);
  }
  if (shape.keep && n > 0) {
    params_ = tm.allocate(Tier::host, n * dtype_size(shape.compute), "host:params_compute");
    params_.zero();
  }
}

size_t RamStateStore::bytes() const {
  size_t b = params_.bytes();
  for (int c = 0; c < 2; ++c) b += master_[c].bytes() + m_[c].bytes() + v_[c].bytes();
  return b;
}

Buffer& RamStateStore::state(HostState s, int copy) {
  STRATA_CHECK(s != HostState::params, "RamStateStore: the kept parameters have one copy",
               "this is a bug in the caller");
  return s == HostState::master ? master_[copy] : s == HostState::m ? m_[copy] : v_[copy];
}

char* RamStateStore::at(HostState s, int copy, int64_t lo) {
  return static_cast<char*>(state(s, copy).data()) + size_t(lo - shape_.begin) * shape_.size(s);
}

ChunkPointers RamStateStore::pointers(int copy, int64_t lo) {
  return {at(HostState::master, copy, lo), at(HostState::m, copy, lo), at(HostState::v, copy, lo)};
}

void RamStateStore::write(HostState s, int copy, int64_t lo, int64_t hi, const float* src) {
  // f32 is copied; bf16 is rounded to nearest (a widened bf16 comes back exactly).
  host::convert_from_f32(at(s, copy, lo), shape_.dtype(s), src, size_t(hi - lo));
}

void RamStateStore::read(HostState s, int copy, int64_t lo, int64_t hi, float* dst) {
  host::convert_to_f32(dst, at(s, copy, lo), shape_.dtype(s), size_t(hi - lo));
}

void RamStateStore::read_compute(int copy, int64_t lo, int64_t hi, void* dst) {
  const size_t esz = dtype_size(shape_.compute);
  if (params_.data())
    std::memcpy(dst, static_cast<const char*>(params_.data()) + size_t(lo - shape_.begin) * esz, size_t(hi - lo) * esz);
  else
    shape_.master_to_compute(dst, at(HostState::master, copy, lo), hi - lo);
}

void RamStateStore::finish_init(int copy) {
  if (params_.data())
    host::convert_parallel(params_.data(), shape_.compute, master_[copy].data(), shape_.format.master,
                           size_t(shape_.elements()));
}

ChunkStates RamStateStore::begin_update(const HostChunk& c, const HostChunk*, int src, int dst) {
  void* params = params_.data()
                     ? static_cast<char*>(params_.data()) + size_t(c.lo - shape_.begin) * dtype_size(shape_.compute)
                     : nullptr;
  return {pointers(src, c.lo), pointers(dst, c.lo), params};
}

void RamStateStore::restore(const HostChunk& c, int copy, void* out) {
  const int64_t n = c.hi - c.lo;
  const char* master = at(HostState::master, copy, c.lo);
  if (params_.data()) {
    const size_t esz = dtype_size(shape_.compute);
    char* kept = static_cast<char*>(params_.data()) + size_t(c.lo - shape_.begin) * esz;
    shape_.master_to_compute(kept, master, n);
    if (out) std::memcpy(out, kept, size_t(n) * esz);
  } else if (out) {
    shape_.master_to_compute(out, master, n);
  }
}

}  // namespace strata::zero
