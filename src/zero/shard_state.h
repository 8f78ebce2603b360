// This rank's committed optimizer state for checkpoints: which model-flat pieces it
// saves, and reading or restoring them wherever they live — the device's part of the shard
// (at stage 0, the model's master and AdamW's moments by flat offset) and the host's part in
// RAM or on NVMe, where whole aligned blocks are read and written.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/flat_source.h"
#include "zero/adamw.h"
#include "zero/device_master.h"
#include "zero/engine_plan.h"
#include "zero/host_optimizer.h"

namespace strata::zero {

// kind 0 master, 1 m, 2 v; a model-flat range (so a checkpoint can be read back by any world
// size or stage) and where it sits in this rank's shard.
struct StatePiece {
  int kind;
  int64_t flat_begin, count, shard_offset;
  bool weight_decay = true;  // its parameter's (StateFormat::master_of: the dtype a master is kept in)
};

class ShardState {
 public:
  // master: the device's master (the shard's at stages 1-3, the model's at stage 0); host:
  // the offloaded part (null: none).
  ShardState(Backend& backend, const EnginePlan& plan, int rank, DeviceMaster& master, AdamW& adam,
             HostOptimizer* host);

  // What this rank saves, in kind-major then shard order, cut to at most max_count
  // elements. Stage 0 (nothing partitioned): rank 0 saves everything, the others nothing.
  std::vector<StatePiece> pieces(int64_t max_count) const;
  // A piece's committed values (the engine's streams drained first).
  void read(const StatePiece& piece, float* out);
  // Restores m and v of everything this rank owns (the master came with attach).
  void load_moments(const FlatSource& m, const FlatSource& v);

 private:
  // Shard offsets [lo, hi) of state `kind`, read or written across the device and host parts.
  void io(int kind, int64_t lo, int64_t hi, float* buf, bool write);
  // n elements of state `kind` at device index `at`, in f32 (bf16 moments converted).
  void device_io(int kind, int64_t at, int64_t n, float* buf, bool write);

  Backend& be_;
  const EnginePlan& plan_;
  const int rank_;
  DeviceMaster& master_;
  AdamW& adam_;
  HostOptimizer* host_;
};

}  // namespace strata::zero
