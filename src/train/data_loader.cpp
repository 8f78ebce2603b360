#include "train/data_loader.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/rng.h"

namespace strata {

DataLoader::DataLoader(std::vector<int32_t> tokens, int seq_len, uint64_t seed, const std::string& origin)
    : DataLoader(std::make_shared<const std::vector<int32_t>>(std::move(tokens)), 0, -1, seq_len, seed, false, origin) {
}

DataLoader::DataLoader(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t begin, int64_t end, int seq_len,
                       uint64_t seed, bool evaluation, const std::string& origin)
    : tokens_(std::move(tokens)),
      begin_(begin),
      end_(end < 0 ? int64_t(tokens_->size()) : end),
      T_(seq_len),
      seed_(seed),
      evaluation_(evaluation) {
  STRATA_CHECK(end_ - begin_ >= int64_t(T_) + 1,
               "data '" + origin + "' has " + std::to_string(end_ - begin_) + " tokens" +
                   (evaluation ? " for validation" : "") + ", fewer than one sample of " + std::to_string(T_ + 1),
               "use more data or a shorter --seq-len");
}

int64_t DataLoader::rows() const { return evaluation_ ? (end_ - begin_ - 1) / T_ : (end_ - begin_) - T_; }

void DataLoader::fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets,
                      std::span<int32_t>) const {
  const std::vector<int32_t>& tok = *tokens_;
  const uint64_t span = uint64_t(end_ - begin_ - T_);  // valid start offsets: begin + [0, span)
  for (int s = 0; s < count; ++s) {
    const int64_t i = first_sample + s;
    int32_t* in = inputs.data() + int64_t(s) * T_;
    int32_t* tg = targets.data() + int64_t(s) * T_;
    if (evaluation_ && i >= rows()) {  // past the validation set: an empty row
      std::fill_n(in, T_, 0);
      std::fill_n(tg, T_, -1);
      continue;
    }
    const int64_t off = begin_ + (evaluation_ ? i * T_ : int64_t(Rng(seed_, uint64_t(i) + 1).below(span)));
    std::copy_n(tok.begin() + off, T_, in);
    std::copy_n(tok.begin() + off + 1, T_, tg);
  }
}

int64_t DataLoader::unmasked_targets(int64_t first_sample, int count) const {
  if (!evaluation_) return int64_t(count) * T_;
  const int64_t real = std::clamp<int64_t>(rows() - first_sample, 0, count);
  return real * T_;
}

int64_t DataLoader::eval_split(int64_t n, double fraction, int seq_len, const std::string& origin) {
  const int64_t held = std::llround(fraction * double(n));
  STRATA_CHECK(held >= int64_t(seq_len) + 1 && n - held >= int64_t(seq_len) + 1,
               "--eval-fraction " + std::to_string(fraction) + " of the " + std::to_string(n) + " tokens of '" +
                   origin + "' leaves " + std::to_string(held) + " for validation and " + std::to_string(n - held) +
                   " for training; each needs one window of " + std::to_string(seq_len + 1),
               "adjust --eval-fraction or --seq-len, or give the validation set as --eval-data");
  return n - held;
}

}  // namespace strata
