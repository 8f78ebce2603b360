#include "train/finetune_records.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata {

FinetuneRecords::FinetuneRecords(const std::string& path, const io::Tokenizer* tokenizer, int vocab_size, int seq_len,
                                 const std::string& prepare)
    : path_(path), T_(seq_len) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "data '" + path + "' cannot be opened", "check --data");
  STRATA_CHECK(!tokenizer || tokenizer->vocab_size() <= vocab_size,
               "tokenizer " + tokenizer->describe() + " has more pieces than the model's vocabulary of " +
                   std::to_string(vocab_size),
               "use the tokenizer.model that came with the model");
  if (tokenizer) tokenizer_name_ = tokenizer->describe();
  const int32_t bos = tokenizer ? tokenizer->bos_id() : -1, eos = tokenizer ? tokenizer->eos_id() : -1;
  pad_ = eos >= 0 ? eos : 0;  // padding follows the records, so causal attention never sees it
  begin_.push_back(0);
  std::string line;
  std::vector<int32_t> prompt, completion;
  for (int64_t line_no = 1; std::getline(f, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank lines separate nothing
    const std::string at = "data '" + path + "', line " + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for huge numbers
      throw_error(at + ": invalid JSON (" + std::string(e.what()) + ")", "each line must be one JSON object");
    }
    STRATA_CHECK(j.is_object(), at + ": not a JSON object", "each line must be one JSON object");
    auto read_ids = [&](const nlohmann::json& arr, const char* ids_key, std::vector<int32_t>& out) {
      STRATA_CHECK(arr.is_array(), at + ": \"" + ids_key + "\" is not an array of token ids",
                   "give token ids as a JSON array of integers");
      for (const auto& v : arr) {
        STRATA_CHECK(v.is_number_integer(), at + ": \"" + ids_key + "\" holds " + v.dump() + ", not a token id",
                     "give token ids as a JSON array of integers");
        const int64_t id = v.get<int64_t>();
        STRATA_CHECK(id >= 0 && id < vocab_size,
                     at + ": token id " + std::to_string(id) + " in \"" + ids_key +
                         "\" is outside the model's vocabulary of " + std::to_string(vocab_size),
                     "the data was tokenized for a different model");
        out.push_back(int32_t(id));
      }
    };
    const std::string how = prepare.empty() ? std::string("prepare it with tools/prepare_data.py") : "run " + prepare;
    STRATA_CHECK(!j.contains("messages") && !j.contains("text"),
                 at + ": " + (j.contains("messages") ? "chat records (\"messages\")" : "\"text\" records") +
                     " need the model's own tokenizer and chat template",
                 how);
    if (j.contains("input_ids")) {  // tools/prepare_data.py's: the whole sample and its loss mask
      add_prepared(j, at, read_ids);
      continue;
    }
    auto ids_of = [&](const char* text_key, const char* ids_key, std::vector<int32_t>& out) {
      out.clear();
      if (j.contains(ids_key)) return read_ids(j[ids_key], ids_key, out);
      STRATA_CHECK(j.contains(text_key) && j[text_key].is_string(),
                   at +
                       ": a record needs \"prompt\" and \"completion\" strings (or \"prompt_ids\" and "
                       "\"completion_ids\" arrays); this one has " +
                       (j.contains(text_key) ? "a non-string \"" + std::string(text_key) + "\""
                                             : "no \"" + std::string(text_key) + "\""),
                   "fix the record");
      STRATA_CHECK(tokenizer, at + ": text records need a tokenizer, and this model has no tokenizer.model",
                   how + " (or give --tokenizer PATH/tokenizer.model, or --tokenizer bytes for byte-level models)");
      out = tokenizer->encode(j[text_key].get<std::string>());
      for (int32_t id : out)
        STRATA_CHECK(id >= 0 && id < vocab_size,
                     at + ": the tokenizer gave id " + std::to_string(id) + ", outside the model's vocabulary of " +
                         std::to_string(vocab_size),
                     "use the tokenizer.model that came with the model");
    };
    ids_of("prompt", "prompt_ids", prompt);
    ids_of("completion", "completion_ids", completion);
    STRATA_CHECK(!completion.empty(), at + ": the completion is empty: the sample has nothing to learn",
                 "drop the record or give it a completion");
    const int64_t start = int64_t(tokens_.size());
    if (bos >= 0) tokens_.push_back(bos);
    tokens_.insert(tokens_.end(), prompt.begin(), prompt.end());
    const int64_t pend = int64_t(tokens_.size()) - start;
    tokens_.insert(tokens_.end(), completion.begin(), completion.end());
    if (eos >= 0) tokens_.push_back(eos);
    // The first target that counts is the first completion token, at input position pend-1.
    STRATA_CHECK(pend >= 1 && pend <= T_,
                 at + ": " +
                     (pend == 0 ? std::string("an empty prompt without a BOS token leaves nothing to predict from")
                                : "the prompt's " + std::to_string(pend) +
                                      " tokens leave no completion token within --seq-len " + std::to_string(T_)),
                 pend == 0 ? "give the record a prompt" : "raise --seq-len or shorten the prompt");
    counts_.resize(tokens_.size(), 1);  // every target from the first completion token on counts
    std::fill(counts_.begin() + start, counts_.begin() + start + pend, uint8_t(0));
    end_record(start);
  }
  STRATA_CHECK(size() > 0, "data '" + path + "' holds no records", "give a JSONL file with one record per line");
}

// Cuts the record that starts at `start` to seq_len+1 tokens and closes it: its number of
// counted targets (positions 1.. whose token is a target) is what unmasked_targets adds.
void FinetuneRecords::end_record(int64_t start) {
  cut_.push_back(int64_t(tokens_.size()) - start > int64_t(T_) + 1);
  if (cut_.back()) {
    tokens_.resize(size_t(start + T_ + 1));
    counts_.resize(tokens_.size());
    ++truncated_;
  }
  int32_t n = 0;
  for (size_t k = size_t(start) + 1; k < tokens_.size(); ++k) n += counts_[k];
  begin_.push_back(int64_t(tokens_.size()));
  counted_.push_back(n);
}

template <typename ReadIds>
void FinetuneRecords::add_prepared(const nlohmann::json& j, const std::string& at, ReadIds& read_ids) {
  std::vector<int32_t> ids;
  read_ids(j["input_ids"], "input_ids", ids);
  STRATA_CHECK(j.contains("loss_mask") && j["loss_mask"].is_array() && j["loss_mask"].size() == ids.size(),
               at + ": \"loss_mask\" must be an array as long as \"input_ids\" (" + std::to_string(ids.size()) + ")",
               "prepare the file with tools/prepare_data.py");
  const int64_t start = int64_t(tokens_.size());
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  for (const auto& m : j["loss_mask"]) {
    STRATA_CHECK(m == 0 || m == 1, at + ": \"loss_mask\" holds " + m.dump() + ", not 0 or 1",
                 "1 marks a token the loss counts, 0 one it does not");
    counts_.push_back(uint8_t(m == 1));
  }
  counts_[size_t(start)] = 0;  // the first token has nothing before it to predict it from
  end_record(start);
  STRATA_CHECK(counted_.back() > 0,
               at + ": no token the loss counts within --seq-len " + std::to_string(T_) + " (of " +
                   std::to_string(ids.size()) + " tokens)",
               "raise --seq-len, or drop the record (its assistant turns start too late)");
}

}  // namespace strata
