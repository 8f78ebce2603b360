// Packed rows and held-out validation data: where records land in rows, what each row's
// inputs, targets and positions are, the held-out split (deterministic, disjoint, never
// trained on), and evaluation sets read once in order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "test_util.h"
#include "train/data_loader.h"
#include "train/finetune_data.h"

namespace strata {
namespace {

std::string write_jsonl(const std::string& name, const std::string& text) {
  return test::write_temp_file("pack", name, text);
}

// Prepared records: record r is `lengths[r]` tokens r·10 + 1, r·10 + 2, …, the loss on all
// but the first.
std::string records_text(const std::vector<int>& lengths) {
  std::string text;
  for (size_t r = 0; r < lengths.size(); ++r) {
    std::string ids, mask;
    for (int j = 0; j < lengths[r]; ++j) {
      ids += (j ? ", " : "") + std::to_string(int(r) * 10 + j + 1);
      mask += j ? ", 1" : "0";
    }
    text += R"({"input_ids": [)" + ids + R"(], "loss_mask": [)" + mask + "]}\n";
  }
  return text;
}

TEST(Packing, RecordsFillRowsWholeWithTheirOwnPositionsAndTargets) {
  // Positions taken (length - 1): 5, 3, 7, 2, 4, in rows of 8. Best fit decreasing: 7 → row
  // 0; 5 → row 1; 4 → row 2; 3 → row 1 (now full); 2 → row 2. Three rows, 21 of 24 used.
  const std::string p = write_jsonl("p.jsonl", records_text({6, 4, 8, 3, 5}));
  FinetuneData d(p, nullptr, 64, 8, 1, "", /*pack=*/true);
  ASSERT_TRUE(d.packed());
  EXPECT_EQ(d.rows(), 3);
  EXPECT_NEAR(d.padding_fraction(), 1.0 - 21.0 / 24.0, 1e-12);
  EXPECT_NE(d.describe().find("packed into 3 rows (12.5% padding)"), std::string::npos) << d.describe();
  std::map<int32_t, int> seen;  // first token of each record -> times seen in the epoch
  int64_t counted = 0;
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<int32_t> in(8), tg(8), pos(8);
    d.fill(i, 1, in, tg, pos);
    counted += d.unmasked_targets(i, 1);
    for (int t = 0; t < 8; ++t) {
      if (in[size_t(t)] == 0) continue;  // padding (token 0 without a tokenizer)
      if (pos[size_t(t)] != 0) {         // inside a record: the next token of the same record
        EXPECT_EQ(in[size_t(t)], in[size_t(t) - 1] + 1) << "row " << i << ", t " << t;
        continue;
      }
      // A record starts: its inputs count from r·10 + 1.
      EXPECT_EQ(in[size_t(t)] % 10, 1) << "row " << i << ", t " << t;
      ++seen[in[size_t(t)]];
    }
    for (int t = 0; t < 8; ++t) {
      if (in[size_t(t)] == 0)
        EXPECT_EQ(tg[size_t(t)], -1);
      else  // every target is the record's own next token, its last token included
        EXPECT_EQ(tg[size_t(t)], in[size_t(t)] + 1) << "row " << i << ", t " << t;
    }
  }
  EXPECT_EQ(seen, (std::map<int32_t, int>{{1, 1}, {11, 1}, {21, 1}, {31, 1}, {41, 1}}));
  EXPECT_EQ(counted, 5 + 3 + 7 + 2 + 4);
}

TEST(Packing, OneRecordPerRowWithoutIt) {
  const std::string p = write_jsonl("u.jsonl", records_text({6, 4, 8, 3, 5}));
  FinetuneData d(p, nullptr, 64, 8, 1);
  EXPECT_FALSE(d.packed());
  EXPECT_EQ(d.rows(), 5);
  EXPECT_NEAR(d.padding_fraction(), 1.0 - 21.0 / 40.0, 1e-12);
}

TEST(Packing, HeldOutRecordsAreDeterministicDisjointAndNeverTrainedOn) {
  const auto a = FinetuneData::held_out(100, 0.1, 7, "x"), b = FinetuneData::held_out(100, 0.1, 7, "x");
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 10u);
  EXPECT_NE(a, FinetuneData::held_out(100, 0.1, 8, "x"));            // drawn from the seed
  EXPECT_EQ(FinetuneData::held_out(100, 0.001, 7, "x").size(), 1u);  // at least one
  const std::string msg = test::error_of([] { FinetuneData::held_out(3, 0.9, 7, "d.jsonl"); });
  EXPECT_NE(msg.find("leaves none to train on"), std::string::npos) << msg;

  std::vector<int> lengths(40, 4);
  const std::string p = write_jsonl("h.jsonl", records_text(lengths));
  auto recs = std::make_shared<const FinetuneRecords>(p, nullptr, 1000, 8);
  const auto held = FinetuneData::held_out(recs->size(), 0.25, 3, p);
  std::vector<int64_t> train;
  for (int64_t r = 0; r < recs->size(); ++r)
    if (!std::binary_search(held.begin(), held.end(), r)) train.push_back(r);
  FinetuneData t(recs, train, 3, true, false), e(recs, held, 3, true, true);
  std::set<int32_t> trained, evaluated;
  std::vector<int32_t> in(8), tg(8), pos(8);
  for (int64_t i = 0; i < 5 * t.rows(); ++i) {  // five epochs
    t.fill(i, 1, in, tg, pos);
    for (int32_t x : in)
      if (x) trained.insert((x - 1) / 10);  // record r's tokens are r·10 + 1, …
  }
  for (int64_t i = 0; i < e.rows(); ++i) {
    e.fill(i, 1, in, tg, pos);
    for (int32_t x : in)
      if (x) evaluated.insert((x - 1) / 10);
  }
  EXPECT_EQ(evaluated.size(), held.size());
  for (int32_t r : evaluated) EXPECT_FALSE(trained.count(r)) << "held-out record " << r << " was trained on";
}

TEST(Packing, AnEvaluationSetIsReadOnceInOrderThenEmpty) {
  const std::string p = write_jsonl("e.jsonl", records_text({3, 3, 3}));
  auto recs = std::make_shared<const FinetuneRecords>(p, nullptr, 64, 4);
  FinetuneData e(recs, {}, 1, false, true);
  std::vector<int32_t> in(8), tg(8);
  e.fill(2, 2, in, tg);  // the last record, then past the end
  EXPECT_EQ(std::vector<int32_t>(in.begin(), in.begin() + 3), (std::vector<int32_t>{21, 22, 23}));
  EXPECT_EQ(std::vector<int32_t>(tg.begin() + 4, tg.end()), (std::vector<int32_t>{-1, -1, -1, -1}));
  EXPECT_EQ(e.unmasked_targets(0, 5), 3 * 2);
  EXPECT_EQ(e.unmasked_targets(2, 3), 2);
}

TEST(Packing, ATokenStreamHoldsOutItsLastTokens) {
  std::vector<int32_t> tokens(1000);
  for (int i = 0; i < 1000; ++i) tokens[size_t(i)] = i;
  const int T = 16;
  const int64_t split = DataLoader::eval_split(1000, 0.1, T, "s.bin");
  EXPECT_EQ(split, 900);
  auto shared = std::make_shared<const std::vector<int32_t>>(tokens);
  DataLoader train(shared, 0, split, T, 5, false, "s.bin"), eval(shared, split, 1000, T, 5, true, "s.bin");
  std::vector<int32_t> in(T), tg(T);
  for (int64_t i = 0; i < 2000; ++i) {
    train.fill(i, 1, in, tg);
    EXPECT_LT(tg.back(), split) << "training window " << i << " reads validation tokens";
  }
  EXPECT_EQ(eval.rows(), (100 - 1) / T);
  eval.fill(1, 1, in, tg);
  EXPECT_EQ(in.front(), 900 + T);
  EXPECT_EQ(tg.back(), 900 + 2 * T);
  eval.fill(eval.rows(), 1, in, tg);  // past the set: empty
  EXPECT_EQ(tg, std::vector<int32_t>(T, -1));
  EXPECT_EQ(eval.unmasked_targets(0, 100), eval.rows() * T);
  const std::string msg = test::error_of([] { DataLoader::eval_split(100, 0.05, 16, "s.bin"); });
  EXPECT_NE(msg.find("each needs one window of 17"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
