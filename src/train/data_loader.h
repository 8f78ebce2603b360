// Deterministic batches from a token stream. Sample i of the run starts at an offset drawn
// from (seed, i) alone, so the sequence of samples does not depend on thread count,
// world size or how a global batch is split into micro-batches (S3 relies on this).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace strata {

class DataLoader {
 public:
  DataLoader(std::vector<int32_t> tokens, int seq_len, uint64_t seed, const std::string& origin);
  // Fills inputs/targets ([count × seq_len] each) with samples first_sample .. first_sample+count-1.
  void fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets) const;

 private:
  std::vector<int32_t> tokens_;
  int T_;
  uint64_t seed_;
};

}  // namespace strata
