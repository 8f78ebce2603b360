// Where a HostOptimizer's states live: host RAM (RamStateStore) or an NVMe swap file
// (NvmeStateStore), chosen once when the optimizer is made. A store holds `copies` copies of
// each state; which copy is committed, and when a step writes the other, is the optimizer's
// policy (speculative steps), not the store's.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "io/nvme_store.h"
#include "zero/zero_options.h"

namespace strata::zero {

// The host optimizer's states by name: the master parameters, Adam's moments, and the
// 16-bit parameters kept apart from an f32 master (stage-3 parameter offload).
enum class HostState { master, m, v, params };

struct HostChunk {
  int bucket;      // the reduce bucket it belongs to
  int64_t lo, hi;  // shard offsets
};

// What a store holds: shard offsets [begin, end), the states' dtypes, the copies.
struct StoreShape {
  int64_t begin = 0, end = 0;
  DType compute = DType::f32;  // the parameters' (and gradients') dtype
  StateFormat format;          // the master's and the moments' dtypes
  int copies = 1;              // of master, m and v
  bool keep = false;           // the 16-bit parameters are kept apart from the master
  int64_t elements() const { return end - begin; }
  DType dtype(HostState s) const {
    return s == HostState::master ? format.master : s == HostState::params ? compute : format.moments;
  }
  size_t size(HostState s) const { return dtype_size(dtype(s)); }
  // n master values in the compute dtype (a copy when they are the same).
  void master_to_compute(void* dst, const void* master, int64_t n) const;
};

// One copy's master, m and v at a chunk's first element, in their dtypes.
struct ChunkPointers {
  void *master, *m, *v;
};

// A chunk ready for the update: the copy to read, the copy to write (the same pointers where
// the store updates in place), and where the kept 16-bit parameters go (null: none kept).
struct ChunkStates {
  ChunkPointers in, out;
  void* params;
};

class StateStore {
 public:
  explicit StateStore(const StoreShape& shape) : shape_(shape) {}
  virtual ~StateStore() = default;
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  const StoreShape& shape() const { return shape_; }
  virtual size_t bytes() const = 0;  // host RAM held
  virtual const io::NvmeFile* nvme_file() const { return nullptr; }
  virtual void set_faults(io::IoFaults*) {}
  // Elements: what a range's lo must be a multiple of (1 in RAM).
  virtual int64_t alignment() const { return 1; }

  // State s of copy `copy` over [lo, hi) (shard offsets), as f32: written (rounded to
  // nearest into a 16-bit state, which a widened one survives exactly) and read (widened).
  virtual void write(HostState s, int copy, int64_t lo, int64_t hi, const float* src) = 0;
  virtual void read(HostState s, int copy, int64_t lo, int64_t hi, float* dst) = 0;
  // The parameters of [lo, hi) in the compute dtype, from copy `copy`.
  virtual void read_compute(int copy, int64_t lo, int64_t hi, void* dst) = 0;
  // After the master of copy `copy` is written: derives the kept parameters from it.
  virtual void finish_init(int copy) = 0;

  // The step: begin_update makes chunk c's states of copy src readable and copy dst
  // writable (`next`, when given, is the chunk that follows: its read may start now);
  // end_update stores what the update wrote. Chunks come in ascending order.
  virtual ChunkStates begin_update(const HostChunk& c, const HostChunk* next, int src, int dst) = 0;
  virtual void end_update(const HostChunk& c, int dst) = 0;
  // Writes chunk c's parameters of copy `copy` in the compute dtype to out (when given) and
  // to the kept parameters: undoes a speculative copy-out.
  virtual void restore(const HostChunk& c, int copy, void* out) = 0;
  // Waits for every write the calling thread issued.
  virtual void flush() {}
  // The step is committed: nothing read ahead for it is valid any more.
  virtual void drop_prefetches() {}

 protected:
  StoreShape shape_;
};

}  // namespace strata::zero
