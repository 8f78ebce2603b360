// The device's master parameters, read and written as f32 whatever they are kept in:
// the f32 master (the shard's at stages 1-3, the model's at stage 0), or a bf16 master —
// the bf16 compute shard itself — with the f32 masters that parameters without weight decay
// keep beside it (AdamW::Group::master_at). Engine set-up, checkpoints and export go through
// this; the step's AdamW updates the same buffers in place. Only backend copies touch them.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "zero/adamw.h"
#include "zero/zero_options.h"

namespace strata::zero {

class DeviceMaster {
 public:
  // f32: the f32 master (by shard offset) or, with a bf16 master, the f32 masters' buffer;
  // compute: the bf16 compute shard (used with a bf16 master only); groups: the device's
  // AdamW groups, numbered by AdamW::place_f32_masters.
  DeviceMaster(Backend& backend, const StateFormat& states, float* f32, void* compute,
               std::vector<AdamW::Group> groups);

  bool bf16() const { return bf16_; }
  // Shard offsets [lo, hi) of the master as f32 (a bf16 master widened exactly).
  void read(int64_t lo, int64_t hi, float* out);
  // Shard offsets [lo, hi) set from f32 values: a bf16 master takes them rounded to nearest
  // (the compute copy), the f32 masters beside it exactly. With an f32 master the compute
  // copy is not touched: the caller casts it.
  void write(int64_t lo, int64_t hi, const float* values);

 private:
  // Calls f(at, a, b) for each f32 master beside a bf16 one that overlaps [lo, hi): shard
  // offsets [a, b), starting at index `at` of the f32 masters' buffer.
  template <typename F>
  void each_f32_master(int64_t lo, int64_t hi, F&& f) const;

  Backend& be_;
  const bool bf16_;
  float* f32_;
  void* compute_;
  std::vector<AdamW::Group> groups_;
  std::vector<uint16_t> half_;  // set-up and checkpoint staging, never in the step
};

}  // namespace strata::zero
