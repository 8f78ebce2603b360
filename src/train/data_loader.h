// Deterministic batches. Sample i of the run depends on (seed, i) alone, so the sequence of
// samples does not depend on thread count, world size or how a global batch is split into
// micro-batches (the ZeRO equivalence tests rely on this).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace strata {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Fills inputs/targets ([count × seq_len] each) with samples first_sample ..
  // first_sample+count-1; a target of -1 is masked (no loss, no gradient). When packed(),
  // also positions [count × seq_len]: each row's records counting 0, 1, … from their first
  // token (Backend::encoder_forward); otherwise positions is not touched (it may be empty).
  virtual void fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets,
                    std::span<int32_t> positions = {}) const = 0;
  // How many targets of those samples are not masked: the trainer weighs each micro-batch
  // by its share of the step's unmasked targets, so the loss is the mean over the global
  // batch's tokens whatever the world size.
  virtual int64_t unmasked_targets(int64_t first_sample, int count) const = 0;
  // Whether rows hold several records, each with positions of its own.
  virtual bool packed() const { return false; }
  // Distinct rows: a training source repeats them (epochs); an evaluation set reads each once
  // and gives empty rows (all targets masked) past them.
  virtual int64_t rows() const = 0;
};

// Windows of seq_len+1 tokens in one token stream: training draws them at offsets from
// (seed, i) within [begin, end); an evaluation set takes consecutive windows (stride seq_len)
// of [begin, end) once.
class DataLoader final : public SampleSource {
 public:
  DataLoader(std::vector<int32_t> tokens, int seq_len, uint64_t seed, const std::string& origin);
  DataLoader(std::shared_ptr<const std::vector<int32_t>> tokens, int64_t begin, int64_t end, int seq_len, uint64_t seed,
             bool evaluation, const std::string& origin);
  void fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets,
            std::span<int32_t> positions = {}) const override;
  int64_t unmasked_targets(int64_t first_sample, int count) const override;
  int64_t rows() const override;

  // Where a token stream of n tokens splits for --eval-fraction: training reads [0, split),
  // validation [split, n). Throws when either part is shorter than one window.
  static int64_t eval_split(int64_t n, double fraction, int seq_len, const std::string& origin);

 private:
  std::shared_ptr<const std::vector<int32_t>> tokens_;
  int64_t begin_, end_;
  int T_;
  uint64_t seed_;
  bool evaluation_;
};

}  // namespace strata
