#include "train/finetune_data.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/rng.h"

namespace strata {

namespace {
std::vector<int64_t> all_of(int64_t n) {
  std::vector<int64_t> v(size_t(n), 0);
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}
}  // namespace

FinetuneData::FinetuneData(const std::string& path, const io::Tokenizer* tokenizer, int vocab_size, int seq_len,
                           uint64_t seed, const std::string& prepare, bool pack)
    : FinetuneData(std::make_shared<FinetuneRecords>(path, tokenizer, vocab_size, seq_len, prepare), {}, seed, pack,
                   false) {}

FinetuneData::FinetuneData(std::shared_ptr<const FinetuneRecords> records, std::vector<int64_t> which, uint64_t seed,
                           bool pack, bool evaluation)
    : recs_(std::move(records)),
      which_(which.empty() ? all_of(recs_->size()) : std::move(which)),
      T_(recs_->seq_len()),
      seed_(seed),
      pack_(pack),
      evaluation_(evaluation) {
  place_rows();
  if (!evaluation_)
    for (auto& p : perm_) p.resize(size_t(rows()));
}

int64_t FinetuneData::span_of(int64_t r) const {
  return pack_ ? recs_->length(r) - 1 : std::min<int64_t>(recs_->length(r), T_);
}

void FinetuneData::place_rows() {
  row_begin_ = {0};
  if (!pack_) {
    row_records_ = which_;
    for (size_t k = 0; k < which_.size(); ++k) row_begin_.push_back(int64_t(k) + 1);
  } else {
    // Best fit decreasing: the longest records first, each into the row it fills most
    // tightly (the fullest row with room), a new row when none has room. Ties by index, so
    // the placement depends on the records alone.
    std::vector<int64_t> order = which_;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return span_of(a) > span_of(b); });
    std::vector<std::vector<int64_t>> rows;
    std::set<std::pair<int64_t, int64_t>> room;  // (free positions, row)
    for (int64_t r : order) {
      const int64_t need = span_of(r);
      auto it = room.lower_bound({need, -1});
      int64_t k;
      if (it == room.end()) {
        k = int64_t(rows.size());
        rows.emplace_back();
        room.insert({T_ - need, k});
      } else {
        k = it->second;
        const int64_t left = it->first - need;
        room.erase(it);
        room.insert({left, k});
      }
      rows[size_t(k)].push_back(r);
    }
    row_records_.clear();
    for (const auto& row : rows) {
      row_records_.insert(row_records_.end(), row.begin(), row.end());
      row_begin_.push_back(int64_t(row_records_.size()));
    }
  }
  row_counted_.assign(size_t(rows()), 0);
  for (int64_t k = 0; k < rows(); ++k)
    for (int64_t i = row_begin_[size_t(k)]; i < row_begin_[size_t(k) + 1]; ++i)
      row_counted_[size_t(k)] += recs_->counted(row_records_[size_t(i)]);
}

// The row sample `sample` reads: training permutes the rows by epoch; an evaluation set reads
// them in order, once (-1: past the end, an empty row).
int64_t FinetuneData::row_of(int64_t sample) const {
  const int64_t n = rows();
  if (evaluation_) return sample < n ? sample : -1;
  const int64_t epoch = sample / n;
  int slot = perm_epoch_[0] == epoch ? 0 : perm_epoch_[1] == epoch ? 1 : -1;
  if (slot < 0) {
    slot = perm_epoch_[0] < perm_epoch_[1] ? 0 : 1;  // replace the older epoch
    std::vector<int64_t>& p = perm_[slot];
    for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
    Rng rng(seed_ ^ 0x5ff7u, uint64_t(epoch) + 1);
    for (int64_t i = n - 1; i > 0; --i) std::swap(p[size_t(i)], p[size_t(rng.below(uint64_t(i) + 1))]);
    perm_epoch_[slot] = epoch;
  }
  return perm_[slot][size_t(sample % n)];
}

void FinetuneData::fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets,
                        std::span<int32_t> positions) const {
  const int32_t pad = recs_->pad();
  for (int s = 0; s < count; ++s) {
    const int64_t k = row_of(first_sample + s);
    int32_t* in = inputs.data() + int64_t(s) * T_;
    int32_t* tg = targets.data() + int64_t(s) * T_;
    int32_t* pos = pack_ ? positions.data() + int64_t(s) * T_ : nullptr;
    int64_t at = 0;  // the row's next free position
    for (int64_t i = k < 0 ? 0 : row_begin_[size_t(k)]; k >= 0 && i < row_begin_[size_t(k) + 1]; ++i) {
      const int64_t r = row_records_[size_t(i)], len = recs_->length(r), n = span_of(r);
      const int32_t* t = recs_->tokens(r);
      const uint8_t* c = recs_->counts(r);
      for (int64_t j = 0; j < n; ++j) {
        in[at + j] = t[j];
        tg[at + j] = j + 1 < len && c[j + 1] ? t[j + 1] : -1;
        if (pos) pos[at + j] = int32_t(j);
      }
      at += n;
    }
    for (int64_t j = at; j < T_; ++j) {  // padding: a record of its own, nothing to learn
      in[j] = pad;
      tg[j] = -1;
      if (pos) pos[j] = int32_t(j - at);
    }
  }
}

int64_t FinetuneData::unmasked_targets(int64_t first_sample, int count) const {
  int64_t n = 0;
  for (int s = 0; s < count; ++s) {
    const int64_t k = row_of(first_sample + s);
    if (k >= 0) n += row_counted_[size_t(k)];
  }
  return n;
}

int64_t FinetuneData::truncated() const {
  int64_t n = 0;
  for (int64_t r : which_) n += recs_->cut(r);
  return n;
}

int64_t FinetuneData::tokens() const {
  int64_t n = 0;
  for (int64_t r : which_) n += recs_->length(r);
  return n;
}

double FinetuneData::padding_fraction() const {
  int64_t used = 0;
  for (int64_t r : which_) used += std::max<int64_t>(recs_->length(r) - 1, 0);
  return rows() ? 1.0 - double(used) / (double(rows()) * double(T_)) : 0.0;
}

std::string FinetuneData::describe() const {
  const int64_t cut = truncated();
  char pad[64];
  std::snprintf(pad, sizeof pad, "%.1f%%", 100.0 * padding_fraction());
  return std::to_string(records()) + " records, " + std::to_string(tokens()) + " tokens" +
         (recs_->tokenizer_name().empty() ? std::string(" (pre-tokenized)") : " by " + recs_->tokenizer_name()) +
         (cut ? ", " + std::to_string(cut) + " cut to --seq-len " + std::to_string(T_) : std::string()) +
         (pack_ ? ", packed into " + std::to_string(rows()) + " rows" : std::string(", one per row")) + " (" + pad +
         " padding)";
}

std::vector<int64_t> FinetuneData::held_out(int64_t n, double fraction, uint64_t seed, const std::string& origin) {
  const int64_t k = std::max<int64_t>(1, std::llround(fraction * double(n)));
  STRATA_CHECK(k < n,
               "--eval-fraction " + std::to_string(fraction) + " of the " + std::to_string(n) + " records of '" +
                   origin + "' leaves none to train on",
               "lower --eval-fraction, or give the validation set as --eval-data");
  std::vector<int64_t> p = all_of(n);
  Rng rng(seed ^ 0xe7a1u, 1);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[size_t(i)], p[size_t(rng.below(uint64_t(i) + 1))]);
  p.resize(size_t(k));
  std::sort(p.begin(), p.end());
  return p;
}

}  // namespace strata
