// The checksum that names a model's frozen weights in an adapter checkpoint: XXH64 of their f32
// values, fed unit by unit in the flat layout's order, as 16 hex digits. Training computes it
// while it reads the weights; `strata export --merge` recomputes it over the base it is given.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/flat_source.h"

namespace strata {

class WeightsChecksum {
 public:
  WeightsChecksum();
  ~WeightsChecksum();
  WeightsChecksum(const WeightsChecksum&) = delete;
  WeightsChecksum& operator=(const WeightsChecksum&) = delete;
  void add(const float* values, int64_t count);
  std::string hex() const;

 private:
  void* state_;  // XXH64_state_t
};

// The checksum of `weights` read a unit at a time (unit_sizes: elements per unit, in order).
std::string weights_checksum(const FlatSource& weights, const std::vector<int64_t>& unit_sizes);

}  // namespace strata
