#include "train/weights_checksum.h"

#include <xxhash.h>

#include <cstdio>

#include "core/error.h"

namespace strata {

WeightsChecksum::WeightsChecksum() : state_(XXH64_createState()) {
  STRATA_CHECK(state_, "out of memory for a checksum state", "free host memory");
  XXH64_reset(static_cast<XXH64_state_t*>(state_), 0);
}

WeightsChecksum::~WeightsChecksum() { XXH64_freeState(static_cast<XXH64_state_t*>(state_)); }

void WeightsChecksum::add(const float* values, int64_t count) {
  XXH64_update(static_cast<XXH64_state_t*>(state_), values, size_t(count) * 4);
}

std::string WeightsChecksum::hex() const {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                (unsigned long long)XXH64_digest(static_cast<const XXH64_state_t*>(state_)));
  return hex;
}

std::string weights_checksum(const FlatSource& weights, const std::vector<int64_t>& unit_sizes) {
  WeightsChecksum sum;
  std::vector<float> unit;
  int64_t begin = 0;
  for (int64_t n : unit_sizes) {
    unit.resize(size_t(n));
    weights.read(begin, n, unit.data());
    sum.add(unit.data(), n);
    begin += n;
  }
  return sum.hex();
}

}  // namespace strata
