// Fine-tuning JSONL: the sentencepiece tokenizer, prompt masking, truncation, the epoch
// order, and every bad record named by file and line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "io/tokenizer.h"
#include "test_util.h"
#include "train/finetune_data.h"

namespace strata {
namespace {

std::string write_jsonl(const std::string& name, const std::string& text) {
  return test::write_temp_file("ft", name, text);
}

using test::error_of;

const std::string kSpm = test::source_path("tests/fixtures/spm-tiny/tokenizer.model");

// Ids from Debian's spm_encode on the committed model (tests/tools/make_spm_fixture.sh).
TEST(SentencePiece, EncodesAsSpmEncodeDoes) {
  const auto tok = io::make_tokenizer(kSpm);
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->encode("Hello world, the king"),
            (std::vector<int32_t>{173, 220, 174, 102, 176, 21, 15, 185, 184, 194, 9, 173, 201, 45}));
}

TEST(SentencePiece, AMissingOrBrokenModelIsNamed) {
  std::string msg = error_of([] { io::make_tokenizer("/nonexistent/tokenizer.model"); });
  EXPECT_NE(msg.find("tokenizer '/nonexistent/tokenizer.model' could not be loaded"), std::string::npos) << msg;
  const std::string junk = write_jsonl("junk.model", "not a protobuf");
  msg = error_of([&] { io::make_tokenizer(junk); });
  EXPECT_NE(msg.find("could not be loaded"), std::string::npos) << msg;
}

TEST(FinetuneData, MasksThePromptAndThePadding) {
  const std::string p = write_jsonl("m.jsonl", R"({"prompt_ids": [5, 6, 7], "completion_ids": [8, 9]})"
                                               "\n");
  FinetuneData d(p, nullptr, 16, 6, 1);
  std::vector<int32_t> in(6), tg(6);
  d.fill(0, 1, in, tg);
  // No tokenizer: no BOS/EOS; the targets of positions 2 and 3 are the completion.
  EXPECT_EQ(in, (std::vector<int32_t>{5, 6, 7, 8, 9, 0}));
  EXPECT_EQ(tg, (std::vector<int32_t>{-1, -1, 8, 9, -1, -1}));
  EXPECT_EQ(d.unmasked_targets(0, 1), 2);
  EXPECT_EQ(d.unmasked_targets(0, 3), 6);  // the one record, three times
}

// tools/prepare_data.py's records: the sample as given, the loss on the tokens marked 1
// (every assistant turn of a chat), nothing added; a record with nothing to learn within
// --seq-len, or a mask of the wrong length, is refused naming the line.
TEST(FinetuneData, PreparedRecordsKeepTheirIdsAndMask) {
  const std::string p = write_jsonl("c.jsonl", R"({"input_ids": [1, 5, 6, 7, 8, 9, 10, 11], )"
                                               R"("loss_mask": [0, 0, 1, 1, 0, 0, 1, 1]})"
                                               "\n");
  FinetuneData d(p, nullptr, 16, 10, 1);
  std::vector<int32_t> in(10), tg(10);
  d.fill(0, 1, in, tg);
  EXPECT_EQ(in, (std::vector<int32_t>{1, 5, 6, 7, 8, 9, 10, 11, 0, 0}));
  EXPECT_EQ(tg, (std::vector<int32_t>{-1, 6, 7, -1, -1, 10, 11, -1, -1, -1}));  // two assistant turns
  EXPECT_EQ(d.unmasked_targets(0, 1), 4);
  std::string msg = error_of([&] {
    FinetuneData(write_jsonl("c2.jsonl", R"({"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 0, 1]})"), nullptr, 16, 2,
                 1);
  });
  EXPECT_NE(msg.find("line 1: no token the loss counts within --seq-len 2"), std::string::npos) << msg;
  msg = error_of([&] {
    FinetuneData(write_jsonl("c3.jsonl", R"({"input_ids": [1, 2, 3], "loss_mask": [0, 1]})"), nullptr, 16, 8, 1);
  });
  EXPECT_NE(msg.find("\"loss_mask\" must be an array as long as \"input_ids\" (3)"), std::string::npos) << msg;
}

TEST(FinetuneData, SentencePieceRecordsGetBosAndEos) {
  const std::string p = write_jsonl("s.jsonl", R"({"prompt": "Hello", "completion": " world"})"
                                               "\n");
  const auto tok = io::make_tokenizer(kSpm);
  const std::vector<int32_t> hp = tok->encode("Hello"), wc = tok->encode(" world");
  const int T = int(hp.size() + wc.size()) + 4;
  FinetuneData d(p, tok.get(), 256, T, 1);
  std::vector<int32_t> in(static_cast<size_t>(T)), tg(static_cast<size_t>(T));
  d.fill(0, 1, in, tg);
  std::vector<int32_t> seq = {1};
  seq.insert(seq.end(), hp.begin(), hp.end());
  seq.insert(seq.end(), wc.begin(), wc.end());
  seq.push_back(2);
  for (size_t j = 0; j < size_t(T); ++j) {
    EXPECT_EQ(in[j], j < seq.size() ? seq[j] : 2) << j;  // padded with EOS
    const bool target = j + 1 < seq.size() && j + 1 >= 1 + hp.size();
    EXPECT_EQ(tg[j], target ? seq[j + 1] : -1) << j;
  }
  EXPECT_EQ(d.unmasked_targets(0, 1), int64_t(wc.size()) + 1);  // the completion and EOS
}

TEST(FinetuneData, LongSamplesAreCutAndCounted) {
  const std::string p = write_jsonl("t.jsonl", R"({"prompt_ids": [1, 2], "completion_ids": [3, 4, 5, 6, 7]})"
                                               "\n"
                                               R"({"prompt_ids": [1], "completion_ids": [3]})"
                                               "\n");
  FinetuneData d(p, nullptr, 16, 4, 1);
  EXPECT_EQ(d.truncated(), 1);
  EXPECT_NE(d.describe().find("1 cut to --seq-len 4"), std::string::npos) << d.describe();
  EXPECT_EQ(d.unmasked_targets(0, 2), 3 + 1);
}

TEST(FinetuneData, EveryEpochVisitsEveryRecordOnceInAFreshOrder) {
  std::string text;
  for (int r = 0; r < 50; ++r)
    text += R"({"prompt_ids": [)" + std::to_string(r) + R"(], "completion_ids": [)" + std::to_string(r) + "]}\n";
  FinetuneData d(write_jsonl("e.jsonl", text), nullptr, 64, 2, 9);
  std::vector<int32_t> in(2), tg(2);
  std::vector<int32_t> order[3];
  for (int e = 0; e < 3; ++e) {
    std::set<int32_t> seen;
    for (int i = 0; i < 50; ++i) {
      d.fill(int64_t(e) * 50 + i, 1, in, tg);
      seen.insert(in[0]);
      order[e].push_back(in[0]);
    }
    EXPECT_EQ(seen.size(), 50u) << "epoch " << e;
  }
  EXPECT_NE(order[0], order[1]);
  // Sample i depends on (seed, i) alone: asking out of order changes nothing.
  d.fill(7, 1, in, tg);
  EXPECT_EQ(in[0], order[0][7]);
  d.fill(2 * 50 + 3, 1, in, tg);
  EXPECT_EQ(in[0], order[2][3]);
}

TEST(FinetuneData, BadRecordsNameTheFileAndLine) {
  struct Bad {
    const char* line;
    const char* says;
  } cases[] = {
      {R"({"prompt": "a", "completion": )", "invalid JSON"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"prompt": "a"})", "no \"completion\""},
      {R"({"prompt": 3, "completion": "b"})", "a non-string \"prompt\""},
      {R"({"prompt_ids": [1], "completion_ids": [300]})",
       "token id 300 in \"completion_ids\" is outside the model's vocabulary of 256"},
      {R"({"prompt_ids": [-1], "completion_ids": [3]})", "token id -1"},
      {R"({"prompt_ids": [1], "completion_ids": ["x"]})", "holds \"x\", not a token id"},
      {R"({"prompt_ids": [1], "completion_ids": []})", "the completion is empty"},
      {R"({"prompt": "", "completion": ""})", "the completion is empty"},
      {R"({"prompt_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9], "completion_ids": [3]})",
       "leave no completion token within --seq-len 8"},
  };
  const auto tok = io::make_tokenizer(kSpm);
  for (const Bad& b : cases) {
    // Two good records and a blank line first: the bad one is on line 4.
    const std::string p =
        write_jsonl("bad.jsonl", std::string(R"({"prompt": "x", "completion": "y"})") + "\n\n" +
                                     R"({"prompt_ids": [4], "completion_ids": [5]})" + "\n" + b.line + "\n");
    const std::string msg = error_of([&] { FinetuneData(p, tok.get(), 256, 8, 1); });
    EXPECT_NE(msg.find("data '" + p + "', line 4: "), std::string::npos) << b.line << " -> " << msg;
    EXPECT_NE(msg.find(b.says), std::string::npos) << b.line << " -> " << msg;
  }
  std::string msg = error_of(
      [&] { FinetuneData(write_jsonl("notok.jsonl", R"({"prompt": "x", "completion": "y"})"), nullptr, 256, 8, 1); });
  EXPECT_NE(msg.find("line 1: text records need a tokenizer"), std::string::npos) << msg;
  msg = error_of([&] { FinetuneData(write_jsonl("empty.jsonl", "\n\n"), nullptr, 256, 8, 1); });
  EXPECT_NE(msg.find("holds no records"), std::string::npos) << msg;
  msg = error_of([&] { FinetuneData(write_jsonl("small.jsonl", "{}"), tok.get(), 37, 8, 1); });
  EXPECT_NE(msg.find("has more pieces than the model's vocabulary of 37"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
