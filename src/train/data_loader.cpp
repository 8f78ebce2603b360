#include "train/data_loader.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace strata {

DataLoader::DataLoader(std::vector<int32_t> tokens, int seq_len, uint64_t seed, const std::string& origin)
    : tokens_(std::move(tokens)), T_(seq_len), seed_(seed) {
  STRATA_CHECK(tokens_.size() >= size_t(T_) + 1,
               "data '" + origin + "' has " + std::to_string(tokens_.size()) + " tokens, fewer than one sample of " +
                   std::to_string(T_ + 1),
               "use more data or a shorter --seq-len");
}

void DataLoader::fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets) const {
  const uint64_t span = tokens_.size() - size_t(T_);  // valid start offsets: [0, span)
  for (int s = 0; s < count; ++s) {
    Rng rng(seed_, uint64_t(first_sample + s) + 1);
    const size_t off = size_t(rng.below(span));
    std::copy_n(tokens_.begin() + std::ptrdiff_t(off), T_, inputs.begin() + std::ptrdiff_t(s) * T_);
    std::copy_n(tokens_.begin() + std::ptrdiff_t(off) + 1, T_, targets.begin() + std::ptrdiff_t(s) * T_);
  }
}

}  // namespace strata
