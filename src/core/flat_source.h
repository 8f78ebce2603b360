// Where a model's f32 values come from, by position in its flat parameter space: imported
// weights (safetensors), a checkpoint's partitions, ... Engines read what each rank owns,
// one unit or piece at a time, so no rank ever holds more than it trains with.
#pragma once
#include <cstdint>

namespace strata {

class FlatSource {
 public:
  virtual ~FlatSource() = default;
  // Values of flat elements [flat_begin, flat_begin + count) into out[count].
  virtual void read(int64_t flat_begin, int64_t count, float* out) const = 0;
};

}  // namespace strata
