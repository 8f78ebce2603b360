// The ZeRO partition layout, the paper's memory formulas, and the sample split across ranks.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/error.h"
#include "zero/partition.h"

namespace strata::zero {
namespace {

// A GPT-2-like table: embeddings (unit 0), L layers of 4 tensors, a final norm; counts are
// chosen so the total (7678 with 3 layers) is not divisible by 3 or 4.
std::vector<ParamSpan> table(int L) {
  std::vector<ParamSpan> t;
  int64_t off = 0;
  auto add = [&](const std::string& n, int unit, int64_t c) {
    t.push_back({n, unit, off, c});
    off += c;
  };
  add("wte", 0, 1200), add("wpe", 0, 302);
  for (int l = 0; l < L; ++l)
    add("w1", 1 + l, 1000), add("b1", 1 + l, 31), add("w2", 1 + l, 1000), add("b2", 1 + l, 17);
  add("lnfw", L + 1, 16), add("lnfb", L + 1, 16);
  return t;
}

TEST(PartitionLayout, SubGroupsArePaddedAlignedAndRespectUnits) {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t sgs : {int64_t(100), int64_t(1500), int64_t(1) << 30}) {
      PartitionLayout lay(table(3), world, sgs, 16);
      int64_t covered = 0, expect_begin = 0;
      for (const SubGroup& g : lay.sub_groups()) {
        EXPECT_EQ(g.flat_begin, expect_begin);
        EXPECT_LE(g.count, sgs);
        EXPECT_EQ(g.padded % (16 * world), 0);
        EXPECT_GE(g.padded, g.count);
        EXPECT_LT(g.padded - g.count, 16 * world);
        EXPECT_EQ(g.shard * world, g.padded);
        // never crosses a unit boundary
        for (const ParamSpan& p : lay.params()) {
          if (p.offset < g.flat_begin + g.count && p.offset + p.count > g.flat_begin) {
            EXPECT_EQ(p.unit, g.unit) << p.name;
          }
        }
        covered += g.count, expect_begin += g.count;
      }
      EXPECT_EQ(covered, lay.model_elements());
      EXPECT_EQ(lay.model_elements(), 7678);
      EXPECT_EQ(lay.padded_elements() % world, 0);
      EXPECT_EQ(lay.shard_elements() * world, lay.padded_elements());
    }
  }
}

TEST(PartitionLayout, RanksOwnEveryElementExactlyOnce) {
  for (int world : {1, 2, 3, 4}) {
    PartitionLayout lay(table(2), world, 700, 16);
    std::vector<int> owners(size_t(lay.model_elements()), 0);
    for (int r = 0; r < world; ++r) {
      int64_t prev_end = -1;
      for (const OwnedPiece& piece : lay.owned_pieces(r)) {
        EXPECT_GE(piece.shard_offset, 0);
        EXPECT_LE(piece.shard_offset + piece.count, lay.shard_elements());
        EXPECT_GT(piece.shard_offset, prev_end - 1);  // pieces are in shard order
        prev_end = piece.shard_offset + piece.count;
        const ParamSpan& p = lay.params()[size_t(piece.param)];
        EXPECT_GE(piece.flat_begin, p.offset);
        EXPECT_LE(piece.flat_begin + piece.count, p.offset + p.count);
        for (int64_t i = 0; i < piece.count; ++i) ++owners[size_t(piece.flat_begin + i)];
      }
    }
    for (size_t i = 0; i < owners.size(); ++i) ASSERT_EQ(owners[i], 1) << "element " << i << ", " << world << " ranks";
  }
}

TEST(PartitionLayout, LargeParametersAreSplitAndBadInputRefused) {
  PartitionLayout lay({{"huge", 0, 0, 1000}}, 2, 300, 8);
  ASSERT_EQ(lay.sub_groups().size(), 4u);  // 300, 300, 300, 100
  EXPECT_EQ(lay.sub_groups()[3].count, 100);
  EXPECT_EQ(lay.sub_groups()[3].padded, 112);
  EXPECT_THROW(PartitionLayout({{"a", 0, 5, 10}}, 2, 100), Error);  // gap
  EXPECT_THROW(PartitionLayout(table(1), 0, 100), Error);
  EXPECT_THROW(PartitionLayout(table(1), 2, 0), Error);
}

// The paper's example (section 5.1): Ψ = 7.5B, N = 64, K = 12 (mixed-precision Adam).
TEST(ModelStateBytes, PaperExample) {
  const double psi = 7.5e9;
  EXPECT_NEAR(model_state_bytes(0, psi, 64) / 1e9, 120.0, 1e-9);
  EXPECT_NEAR(model_state_bytes(1, psi, 64) / 1e9, 31.40625, 1e-9);   // 31.4 GB
  EXPECT_NEAR(model_state_bytes(2, psi, 64) / 1e9, 16.640625, 1e-9);  // 16.6 GB
  EXPECT_NEAR(model_state_bytes(3, psi, 64) / 1e9, 1.875, 1e-9);      // 1.9 GB
  // f32 counterparts: 4-byte params and grads, K = 8 (m, v; the params are the master)
  EXPECT_NEAR(model_state_bytes(0, 1.0, 4, 8, 4, 4), 16.0, 1e-12);
  EXPECT_NEAR(model_state_bytes(3, 1.0, 4, 8, 4, 4), 4.0, 1e-12);
  EXPECT_THROW(model_state_bytes(4, psi, 64), Error);
}

// The global batch of a step is the same samples whatever the world size and split.
TEST(FirstSample, GlobalBatchIndependentOfWorldSize) {
  struct Split {
    int world, micro, accum;
  };
  for (int64_t step : {0, 1, 7}) {
    std::vector<int64_t> reference;
    for (Split s : {Split{1, 8, 1}, Split{1, 2, 4}, Split{2, 4, 1}, Split{2, 2, 2}, Split{4, 2, 1}, Split{4, 1, 2},
                    Split{8, 1, 1}}) {
      std::vector<int64_t> samples;
      for (int r = 0; r < s.world; ++r)
        for (int k = 0; k < s.accum; ++k)
          for (int i = 0; i < s.micro; ++i) samples.push_back(first_sample(step, r, s.world, s.micro, s.accum, k) + i);
      if (reference.empty()) reference = samples;
      EXPECT_EQ(samples, reference) << "world " << s.world << " micro " << s.micro << " accum " << s.accum;
    }
    EXPECT_EQ(reference.front(), step * 8);
    EXPECT_EQ(reference.back(), step * 8 + 7);
  }
}

}  // namespace
}  // namespace strata::zero
