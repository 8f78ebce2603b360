// Fine-tuning samples: rows of seq_len tokens made from JSONL records (finetune_records.h).
//
// One record per row (pack false): the record, then padding; its loss mask its own. Packed
// (pack true): records placed whole into rows, best fit in decreasing length (the fewest rows
// a greedy placement finds), each taking length - 1 positions (its inputs; the last token is
// only a target) with positions counting 0, 1, … from its first row, so that attention, RoPE
// and learned positions see each record as if it were alone in its row; the rest of a row is
// padding with targets masked. The placement is made once; training visits the rows in a
// fresh permutation each epoch, drawn from (seed, epoch), so sample i depends on (seed, i)
// alone. An evaluation set visits its rows once, in order; samples past them are empty rows.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "train/data_loader.h"
#include "train/finetune_records.h"

namespace strata {

class FinetuneData final : public SampleSource {
 public:
  // Every record of the file, shuffled by epoch (training).
  FinetuneData(const std::string& path, const io::Tokenizer* tokenizer, int vocab_size, int seq_len, uint64_t seed,
               const std::string& prepare = "", bool pack = false);
  // The records `which` (indices into `records`) of a parsed file.
  FinetuneData(std::shared_ptr<const FinetuneRecords> records, std::vector<int64_t> which, uint64_t seed, bool pack,
               bool evaluation);

  void fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets,
            std::span<int32_t> positions = {}) const override;
  int64_t unmasked_targets(int64_t first_sample, int count) const override;
  bool packed() const override { return pack_; }
  int64_t rows() const override { return int64_t(row_begin_.size()) - 1; }

  int64_t records() const { return int64_t(which_.size()); }
  int64_t truncated() const;
  int64_t tokens() const;
  // The share of the rows' positions that hold no record (padding).
  double padding_fraction() const;
  std::string describe() const;

  // The records held out of `n` for validation: round(fraction·n) of them (at least one),
  // drawn from the seed, in increasing order. Throws when nothing would be left to train on.
  static std::vector<int64_t> held_out(int64_t n, double fraction, uint64_t seed, const std::string& origin);

 private:
  void place_rows();
  int64_t row_of(int64_t sample) const;
  // Record r's positions in a row: its inputs when packed (length - 1), else its tokens.
  int64_t span_of(int64_t r) const;

  std::shared_ptr<const FinetuneRecords> recs_;
  std::vector<int64_t> which_;  // the records of this set
  int T_;
  uint64_t seed_;
  bool pack_, evaluation_;
  std::vector<int64_t> row_begin_;    // row k holds row_records_[row_begin_[k], row_begin_[k+1])
  std::vector<int64_t> row_records_;  // record indices (into recs_)
  std::vector<int64_t> row_counted_;  // per row: its targets that count
  // The permutations of the last two epochs asked for (a step may straddle an epoch's end);
  // sized once, refilled in place.
  mutable std::vector<int64_t> perm_[2];
  mutable int64_t perm_epoch_[2] = {-1, -1};
};

}  // namespace strata
