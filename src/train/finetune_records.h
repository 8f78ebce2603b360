// Fine-tuning data as parsed from JSONL, one record per line: {"prompt": ..., "completion": ...}
// as text (tokenized by the model's sentencepiece tokenizer.model, or bytes), or pre-tokenized
// as {"prompt_ids": [...], "completion_ids": [...]}: a record is [bos] prompt completion [eos]
// cut to seq_len+1 tokens, the loss masked on the prompt. Or as tools/prepare_data.py writes
// them (chat turns through the model's own tokenizer and chat template): {"input_ids": [...],
// "loss_mask": [0|1, ...]}, the record exactly as given (cut to seq_len+1), the loss counting
// the tokens marked 1 (the assistant's turns).
//
// The truncation rule: a record longer than seq_len+1 tokens keeps its first seq_len+1 (one
// row's inputs and their next-token targets); the rest is dropped and the record counted as
// cut. A record whose cut leaves no target the loss counts is an error naming its line.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "io/tokenizer.h"

namespace strata {

class FinetuneRecords {
 public:
  // `tokenizer` may be null when every record is pre-tokenized. Bad records (invalid JSON,
  // missing fields, ids outside [0, vocab_size), empty completions, a prompt that leaves no
  // completion token within seq_len) are errors naming the file and line.
  // `prepare`: the command that prepares this file with the model's own tokenizer and chat
  // template (tools/prepare_data.py), named when a record needs it.
  FinetuneRecords(const std::string& path, const io::Tokenizer* tokenizer, int vocab_size, int seq_len,
                  const std::string& prepare = "");

  int64_t size() const { return int64_t(begin_.size()) - 1; }
  // Record r's tokens (at most seq_len+1), and per token whether the loss counts it as a
  // target (the first token never).
  int64_t length(int64_t r) const { return begin_[size_t(r) + 1] - begin_[size_t(r)]; }
  const int32_t* tokens(int64_t r) const { return tokens_.data() + begin_[size_t(r)]; }
  const uint8_t* counts(int64_t r) const { return counts_.data() + begin_[size_t(r)]; }
  // Its targets that count.
  int32_t counted(int64_t r) const { return counted_[size_t(r)]; }
  bool cut(int64_t r) const { return cut_[size_t(r)] != 0; }  // longer than seq_len+1 in the file
  int32_t pad() const { return pad_; }                        // the token that fills a row after its records
  int seq_len() const { return T_; }
  int64_t truncated() const { return truncated_; }
  int64_t total_tokens() const { return int64_t(tokens_.size()); }
  const std::string& path() const { return path_; }
  const std::string& tokenizer_name() const { return tokenizer_name_; }

 private:
  void end_record(int64_t start);
  template <typename ReadIds>
  void add_prepared(const nlohmann::json& j, const std::string& at, ReadIds& read_ids);

  std::string path_;
  int T_;
  int32_t pad_;
  std::vector<int32_t> tokens_;   // every record's tokens, concatenated (each ≤ seq_len+1)
  std::vector<int64_t> begin_;    // record r is tokens_[begin_[r], begin_[r+1])
  std::vector<uint8_t> counts_;   // per token: 1 when the loss counts it as a target
  std::vector<int32_t> counted_;  // per record: its targets that count
  std::vector<uint8_t> cut_;      // per record: 1 when it was cut to seq_len+1
  int64_t truncated_ = 0;
  std::string tokenizer_name_;
};

}  // namespace strata
