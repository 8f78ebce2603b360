// Fine-tuning data: JSONL, one record per line, {"prompt": ..., "completion": ...} as text
// (tokenized by the model's sentencepiece tokenizer.model, or bytes), or pre-tokenized as
// {"prompt_ids": [...], "completion_ids": [...]}: a sample is [bos] prompt completion [eos]
// cut to seq_len+1 tokens, the loss masked on the prompt (targets -1) and on the padding. Or
// as tools/prepare_data.py writes them (chat turns through the model's own tokenizer and
// chat template): {"input_ids": [...], "loss_mask": [0|1, ...]}, the sample exactly as given
// (cut to seq_len+1), the loss counting the tokens marked 1 (the assistant's turns).
// Records are visited in a fresh permutation each epoch, drawn from (seed, epoch), so sample
// i depends on (seed, i) alone as with token streams.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <vector>

#include "io/tokenizer.h"
#include "train/data_loader.h"

namespace strata {

class FinetuneData final : public SampleSource {
 public:
  // `tokenizer` may be null when every record is pre-tokenized. Bad records (invalid JSON,
  // missing fields, ids outside [0, vocab_size), empty completions, a prompt that leaves no
  // completion token within seq_len) are errors naming the file and line.
  // `prepare`: the command that prepares this file with the model's own tokenizer and chat
  // template (tools/prepare_data.py), named when a record needs it.
  FinetuneData(const std::string& path, const io::Tokenizer* tokenizer, int vocab_size, int seq_len, uint64_t seed,
               const std::string& prepare = "");
  void fill(int64_t first_sample, int count, std::span<int32_t> inputs, std::span<int32_t> targets) const override;
  int64_t unmasked_targets(int64_t first_sample, int count) const override;

  int64_t records() const { return int64_t(begin_.size()) - 1; }
  int64_t truncated() const { return truncated_; }
  int64_t tokens() const { return int64_t(tokens_.size()); }
  std::string describe() const;

 private:
  int64_t record_of(int64_t sample) const;
  void end_record(int64_t start);
  template <typename ReadIds>
  void add_prepared(const nlohmann::json& j, const std::string& at, ReadIds& read_ids);

  std::string path_;
  int T_;
  uint64_t seed_;
  int32_t pad_;
  std::vector<int32_t> tokens_;   // every sample's tokens, concatenated (each ≤ seq_len+1)
  std::vector<int64_t> begin_;    // sample r is tokens_[begin_[r], begin_[r+1])
  std::vector<uint8_t> counts_;   // per token: 1 when the loss counts it as a target
  std::vector<int32_t> counted_;  // per sample: its targets that count
  int64_t truncated_ = 0;
  std::string tokenizer_name_;
  // The permutations of the last two epochs asked for (a step may straddle an epoch's end);
  // sized once, refilled in place.
  mutable std::vector<int64_t> perm_[2];
  mutable int64_t perm_epoch_[2] = {-1, -1};
};

}  // namespace strata
