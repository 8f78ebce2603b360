// Text to token ids for fine-tuning data: a model's sentencepiece `tokenizer.model` (Llama
// and its relatives), or UTF-8 bytes for Strata's byte-level models.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strata::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  virtual int vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1: none
  virtual int32_t eos_id() const = 0;  // -1: none
  virtual std::string describe() const = 0;
};

// `spec`: "bytes", or the path of a sentencepiece model file. Throws with the path and
// sentencepiece's own message when the file cannot be loaded.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec);

}  // namespace strata::io
