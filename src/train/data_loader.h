// Deterministic batches. Sample i of the run depends on (seed, i) alone, so the sequence of
// samples does not depend on thread count, world size or how a global batch is split into
// micro-batches (the ZeRO equivalence tests rely on this).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Fills inputs/targets ([count × seq_len] each) with samples first_sample ..
  // first_sample+count-1; a target of -1 is masked (no loss, no gradient).
  virtual void fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets) const = 0;
  // How many targets of those samples are not masked: the trainer weighs each micro-batch
  // by its share of the step's unmasked targets, so the loss is the mean over the global
  // batch's tokens whatever the world size.
  virtual int64_t unmasked_targets(int64_t first_sample, int count) const = 0;
};

// Windows of seq_len+1 tokens at offsets drawn from (seed, i) in one token stream.
class DataLoader final : public SampleSource {
 public:
  DataLoader(std::vector<int32_t> tokens, int seq_len, uint64_t seed, const std::string& origin);
  void fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets) const override;
  int64_t unmasked_targets(int64_t, int count) const override { return int64_t(count) * T_; }

 private:
  std::vector<int32_t> tokens_;
  int T_;
  uint64_t seed_;
};

}  // namespace strata
