#include "io/tokenizer.h"

#include <sentencepiece_processor.h>

#include "core/error.h"

namespace strata::io {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = int32_t(static_cast<unsigned char>(text[i]));
    return ids;
  }
  int vocab_size() const override { return 256; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  std::string describe() const override { return "UTF-8 bytes"; }
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) : path_(path) {
    const auto status = sp_.Load(path);
    STRATA_CHECK(status.ok(), "tokenizer '" + path + "' could not be loaded: " + status.ToString(),
                 "give --tokenizer the model's sentencepiece tokenizer.model (or 'bytes' for byte-level models)");
  }
  std::vector<int32_t> encode(const std::string& text) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    STRATA_CHECK(status.ok(), "tokenizer '" + path_ + "' failed on a text: " + status.ToString(),
                 "check that the data is UTF-8 text");
    return {ids.begin(), ids.end()};
  }
  int vocab_size() const override { return sp_.GetPieceSize(); }
  int32_t bos_id() const override { return sp_.bos_id(); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  std::string describe() const override {
    return "sentencepiece '" + path_ + "' (" + std::to_string(vocab_size()) + " pieces)";
  }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& spec) {
  if (spec == "bytes") return std::make_unique<ByteTokenizer>();
  return std::make_unique<SentencePieceTokenizer>(spec);
}

}  // namespace strata::io
