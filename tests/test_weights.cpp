// Weights in and out: the safetensors reader and writer (round trips in every dtype, and
// every malformed header refused with the reason), Hugging Face GPT-2 import (single file
// F32 and sharded BF16 under "transformer.", both written by tests/tools/make_hf_fixture.py)
// giving PyTorch's logits, and export -> import giving back the same values.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cpu/cpu_backend.h"
#include "io/safetensors.h"
#include "model/hf_export.h"
#include "model/hf_weights.h"
#include "model/model_factory.h"
#include "test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  return (fs::temp_directory_path() / ("strata_weights_" + std::to_string(getpid()) + "_" + name)).string();
}

using test::error_of;

TEST(Safetensors, RoundTripsEveryDtype) {
  const std::string path = tmp("rt.safetensors");
  std::vector<float> a(1000), b(333);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i) * 0.37f - 100.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 1.0f / float(i + 1);
  {
    io::SafetensorsWriter w(path, {{"a", DType::bf16, {10, 100}}, {"b", DType::f16, {333}}, {"c", DType::f32, {333}}},
                            {{"k", "v"}});
    w.write_f32(a, DType::bf16);
    w.write_f32(b, DType::f16);
    w.write_f32(b, DType::f32);
    const uint64_t h = w.finish();
    EXPECT_EQ(h, io::file_xxh64(path));
  }
  io::SafetensorsFile f(path);
  EXPECT_EQ(f.header().metadata.at("k"), "v");
  std::vector<float> got(1000);
  f.read_f32(f.tensor("a"), 0, got);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(a[i]))) << i;
  got.resize(33);
  f.read_f32(f.tensor("b"), 300, got);  // a slice
  for (size_t i = 0; i < 33; ++i) ASSERT_EQ(got[i], f16_to_f32(f32_to_f16(b[300 + i]))) << i;
  f.read_f32(f.tensor("c"), 300, got);
  for (size_t i = 0; i < 33; ++i) ASSERT_EQ(got[i], b[300 + i]) << i;
  fs::remove(path);
}

// A file with a hand-written header over `data` bytes of payload.
void write_raw(const std::string& path, const std::string& header, size_t data, uint64_t claimed = 0) {
  std::ofstream f(path, std::ios::binary);
  const uint64_t n = claimed ? claimed : header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(data, '\0');
}

TEST(Safetensors, MalformedHeadersAreRefusedWithTheReason) {
  const std::string p = tmp("bad.safetensors");
  auto refused = [&](const std::string& header, size_t data, const std::string& reason, uint64_t claimed = 0) {
    write_raw(p, header, data, claimed);
    const std::string msg = error_of([&] { io::SafetensorsFile f(p); });
    EXPECT_NE(msg.find(reason), std::string::npos) << header << " -> " << msg;
  };
  refused(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, "truncated");
  refused(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})", 16, "not valid JSON");
  refused(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16, "disagree");
  refused(R"({"a": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}})", 16, "unknown dtype");
  refused(R"({"a": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})", 16, "negative");
  refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [2],
           "data_offsets": [4, 12]}})",
          12, "overlap");
  refused(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 12, "trailing");
  refused(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}})", 16,
          "too many elements");
  refused(R"({"a": 1})", 0, "not an object");
  refused(R"([1, 2])", 0, "not a JSON object");
  refused("{}", 0, "past the file", 1 << 20);
  write_raw(p, "", 0, 0);
  fs::resize_file(p, 4);
  EXPECT_NE(error_of([&] { io::SafetensorsFile f(p); }).find("too short"), std::string::npos);
  fs::remove(p);
}

struct Expected {
  int B, T, V;
  std::vector<int32_t> tokens;
  std::vector<float> logits;
};

Expected load_expected(const std::string& dir) {
  std::ifstream f(dir + "/expected.bin", std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture: run tests/tools/make_hf_fixture.py";
  Expected e{};
  int32_t h[3];
  f.read(reinterpret_cast<char*>(h), sizeof h);
  e.B = h[0], e.T = h[1], e.V = h[2];
  e.tokens.resize(size_t(e.B * e.T));
  e.logits.resize(size_t(e.B * e.T * e.V));
  f.read(reinterpret_cast<char*>(e.tokens.data()), std::streamsize(e.tokens.size() * 4));
  f.read(reinterpret_cast<char*>(e.logits.data()), std::streamsize(e.logits.size() * 4));
  EXPECT_TRUE(f.good()) << "fixture truncated";
  return e;
}

// Strata's logits for the fixture's tokens with the imported weights.
std::vector<float> strata_logits(const std::string& dir, const Expected& e) {
  const ModelSpec spec = ModelSpec::load(dir + "/config.json");
  cpu::CpuBackend be({size_t(1) << 30, 0});
  std::unique_ptr<Model> model = make_model(spec, be, e.B, e.T, DType::f32);
  HfWeights w(dir, spec);
  std::vector<float> master(size_t(model->num_params()));
  w.read(0, model->num_params(), master.data());
  be.upload(model->master_flat().data, master.data(), master.size() * 4);
  model->forward(e.tokens);
  std::vector<float> out;
  const std::vector<float> logits = test::download_f32(be, model->logits());
  const float* l = logits.data();
  // Gemma-2 caps its logits (transformers' logits are capped; Strata caps them in the loss).
  const float cap = spec.arch() == "llama" ? spec.llama.final_softcap : 0.0f;
  for (int n = 0; n < e.B * e.T; ++n)
    for (int v = 0; v < e.V; ++v) {
      const float x = l[size_t(n) * size_t(spec.padded_vocab_size()) + size_t(v)];
      out.push_back(cap > 0 ? cap * std::tanh(x / cap) : x);
    }
  return out;
}

ModelSpec gpt2_spec(const GPT2Config& c) {
  ModelSpec s;
  s.gpt2 = c;
  return s;
}

// Tolerance: f32 forward against PyTorch's float64 on the same (stored) weights.
TEST(HfGpt2, SingleFileF32GivesTorchLogits) {
  const std::string dir = test::source_path("tests/fixtures/hf-gpt2-tiny");
  const Expected e = load_expected(dir);
  const std::vector<float> got = strata_logits(dir, e);
  test::expect_close(got.data(), e.logits.data(), got.size(), 2e-5, 1e-4, "logits (F32 weights)");
}

TEST(HfGpt2, ShardedBf16UnderTransformerPrefixGivesTorchLogits) {
  const std::string dir = test::source_path("tests/fixtures/hf-gpt2-tiny-sharded");
  const Expected e = load_expected(dir);
  const std::vector<float> got = strata_logits(dir, e);
  test::expect_close(got.data(), e.logits.data(), got.size(), 2e-5, 1e-4, "logits (sharded BF16 weights)");
}

// The same contract for Llama: RMSNorm, rotate-half RoPE (theta 500000), 4 query heads over
// 2 kv heads, SwiGLU, untied head; PyTorch's float64 reference forward on the stored weights.
TEST(HfLlama, SingleFileF32GivesTorchLogits) {
  const std::string dir = test::source_path("tests/fixtures/hf-llama-tiny");
  const Expected e = load_expected(dir);
  const std::vector<float> got = strata_logits(dir, e);
  test::expect_close(got.data(), e.logits.data(), got.size(), 2e-5, 1e-4, "Llama logits (F32 weights)");
}

TEST(HfLlama, ShardedF16GivesTorchLogits) {
  const std::string dir = test::source_path("tests/fixtures/hf-llama-tiny-sharded");
  const Expected e = load_expected(dir);
  const std::vector<float> got = strata_logits(dir, e);
  test::expect_close(got.data(), e.logits.data(), got.size(), 2e-5, 1e-4, "Llama logits (sharded F16 weights)");
}

// The Llama-family variants people fine-tune, as transformers 4.51 and 5.x save and run them
// (tests/tools/make_hf_family_fixtures.py): every key of their config.json read, the
// weights imported, and the logits of transformers' own float64 forward.
const char* const kFamilyNames[] = {"gpt2",    "llama2", "llama31-scaled", "llama32-tied",   "llama2-linear",
                                    "mistral", "qwen2",  "qwen3",          "mistral-window", "qwen2-window",
                                    "olmo2",   "phi3",   "gemma2",         "gemma3-text",    "gemma3"};
std::vector<std::string> family_dirs() {
  std::vector<std::string> dirs;
  for (const char* root : {"tests/fixtures/hf-families/", "tests/fixtures/hf-families-tf5/"})
    for (const char* name : kFamilyNames) dirs.push_back(test::source_path(root) + name);
  return dirs;
}

TEST(HfFamilies, LogitsMatchTransformers) {
  for (const std::string& dir : family_dirs()) {
    const Expected e = load_expected(dir);
    const std::vector<float> got = strata_logits(dir, e);
    test::expect_close(got.data(), e.logits.data(), got.size(), 2e-5, 1e-4, dir + " logits");
  }
}

class VectorSource final : public FlatSource {
 public:
  explicit VectorSource(std::vector<float> v) : v_(std::move(v)) {}
  void read(int64_t b, int64_t n, float* out) const override { std::memcpy(out, v_.data() + b, size_t(n) * 4); }
  std::vector<float> v_;
};

TEST(HfGpt2, ExportThenImportGivesTheSameValues) {
  const GPT2Config cfg = test::tiny_config();
  std::vector<float> v(size_t(cfg.num_params()));
  Rng rng(5);
  for (float& x : v) x = float(rng.below(1 << 20)) / float(1 << 16) - 8.0f;
  // Padded vocabulary rows are not exported: they read back as zeros.
  const int64_t pad_begin = int64_t(cfg.vocab_size) * cfg.n_embd, pad_end = int64_t(cfg.padded_vocab_size) * cfg.n_embd;
  for (int64_t i = pad_begin; i < pad_end; ++i) v[size_t(i)] = 0;
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string dir = tmp(std::string("export_") + std::string(dtype_name(dt)));
    export_hf(gpt2_spec(cfg), VectorSource(v), dir, dt);
    ASSERT_TRUE(is_hf_model_dir(dir));
    const GPT2Config back = GPT2Config::load(dir + "/config.json");
    EXPECT_EQ(back.num_params(), cfg.num_params());
    HfWeights w(dir, gpt2_spec(back));
    std::vector<float> got(v.size());
    w.read(0, int64_t(got.size()), got.data());
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = dt == DType::f32 ? v[i] : bf16_to_f32(f32_to_bf16(v[i]));
      ASSERT_EQ(got[i], want) << dtype_name(dt) << " element " << i;
    }
    fs::remove_all(dir);
  }
}

// A directory export in shards of at most --max-shard-size, cut and named as save_pretrained
// cuts them, with the index; it reads back as the same values, and a second export into the
// same directory, cut differently, replaces the first one's files.
TEST(HfExport, ShardsAsSavePretrainedWithTheIndex) {
  const ModelSpec spec = ModelSpec::load(test::source_path("configs/llama-tiny-bytes.json"));
  std::vector<float> v(size_t(spec.num_params()));
  Rng rng(11);
  for (float& x : v) x = float(rng.below(1 << 20)) / float(1 << 16) - 8.0f;
  for (const HfTensor& t : hf_tensor_table(spec))
    for (int64_t i = t.offset + t.hf_rows * t.cols; i < t.offset + t.count; ++i) v[size_t(i)] = 0;
  size_t largest = 0, total = 0;
  for (const HfTensor& t : hf_tensor_table(spec)) {
    const size_t b = size_t(t.hf_rows * t.cols) * 4;
    largest = std::max(largest, b), total += b;
  }
  const std::string dir = tmp("sharded_export");
  const size_t limit = largest + largest / 2;  // at least two tensors in most shards
  export_hf(spec, VectorSource(v), dir, DType::f32, limit);
  ASSERT_TRUE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
  std::ifstream in(fs::path(dir) / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<size_t>(), total);
  std::set<std::string> shards;
  for (const auto& [name, file] : index["weight_map"].items()) shards.insert(file.get<std::string>());
  const size_t n = shards.size();
  ASSERT_GT(n, 2u);
  ASSERT_LT(n, hf_tensor_table(spec).size());
  size_t k = 0;
  for (const std::string& f : shards) {
    char want[64];
    std::snprintf(want, sizeof want, "model-%05zu-of-%05zu.safetensors", ++k, n);
    EXPECT_EQ(f, want);
    EXPECT_LE(fs::file_size(fs::path(dir) / f), limit + 4096) << f << ": at most the limit and a header";
  }
  {
    HfWeights w(dir, ModelSpec::load(dir + "/config.json"));
    std::vector<float> got(v.size());
    w.read(0, int64_t(got.size()), got.data());
    EXPECT_EQ(got, v);
  }
  {  // A failed export (the source fails mid-way, as a full disk would) leaves the shards as they were.
    struct Failing final : FlatSource {
      void read(int64_t, int64_t, float*) const override { throw_error("read failed", "a test"); }
    };
    EXPECT_THROW(export_hf(spec, Failing(), dir, DType::f32), Error);
    HfWeights w(dir, ModelSpec::load(dir + "/config.json"));
    std::vector<float> got(v.size());
    w.read(0, int64_t(got.size()), got.data());
    EXPECT_EQ(got, v);
    for (const auto& f : fs::directory_iterator(dir))
      EXPECT_FALSE(f.path().extension() == ".tmp") << f.path() << " is left from the failed export";
  }
  export_hf(spec, VectorSource(v), dir, DType::f32);  // 5 GB: one file
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.safetensors"));
  for (const auto& f : fs::directory_iterator(dir))
    EXPECT_FALSE(f.path().filename().string().starts_with("model-")) << f.path() << " is left from the sharded export";
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  fs::remove_all(dir);
}

TEST(HfGpt2, MismatchedWeightsAreRefusedWithTheTensorAndShapes) {
  const std::string dir = test::source_path("tests/fixtures/hf-gpt2-tiny");
  GPT2Config wider = GPT2Config::load(dir + "/config.json");
  wider.n_embd = 32;
  std::string msg = error_of([&] { HfWeights w(dir, gpt2_spec(wider)); });
  EXPECT_NE(msg.find("'wte.weight' has shape [37, 16], the model config needs [37, 32]"), std::string::npos) << msg;
  GPT2Config deeper = GPT2Config::load(dir + "/config.json");
  deeper.n_layer = 3;
  msg = error_of([&] { HfWeights w(dir, gpt2_spec(deeper)); });
  EXPECT_NE(msg.find("no tensor 'h.2.ln_1.weight'"), std::string::npos) << msg;
  GPT2Config shallower = GPT2Config::load(dir + "/config.json");
  shallower.n_layer = 1;
  msg = error_of([&] { HfWeights w(dir, gpt2_spec(shallower)); });
  EXPECT_NE(msg.find("which GPT-2 has no place for"), std::string::npos) << msg;
  // A config that would change the computation is refused, not ignored.
  const std::string cfg_path = tmp("config.json");
  std::ofstream(cfg_path) << R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "vocab_size": 37,
                                  "n_positions": 16, "activation_function": "relu"})";
  msg = error_of([&] { GPT2Config::load(cfg_path); });
  EXPECT_NE(msg.find("activation_function"), std::string::npos) << msg;
  fs::remove(cfg_path);
}

void export_then_import(const std::string& config) {
  SCOPED_TRACE(config);
  const ModelSpec spec = ModelSpec::load(config);
  std::vector<float> v(size_t(spec.num_params()));
  Rng rng(9);
  for (float& x : v) x = float(rng.below(1 << 20)) / float(1 << 16) - 8.0f;
  // The padded vocabulary rows of the embedding and the head are not exported.
  for (const HfTensor& t : hf_tensor_table(spec))
    for (int64_t i = t.offset + t.hf_rows * t.cols; i < t.offset + t.count; ++i) v[size_t(i)] = 0;
  for (DType dt : {DType::f32, DType::f16}) {
    const std::string dir = tmp(std::string("llama_export_") + std::string(dtype_name(dt)));
    export_hf(spec, VectorSource(v), dir, dt);
    const ModelSpec back = ModelSpec::load(dir + "/config.json");
    EXPECT_EQ(back.family, spec.family);
    EXPECT_EQ(back.shape_json(), spec.shape_json());
    HfWeights w(dir, back);
    std::vector<float> got(v.size());
    w.read(0, int64_t(got.size()), got.data());
    for (size_t i = 0; i < v.size(); ++i) {
      const float want = dt == DType::f32 ? v[i] : f16_to_f32(f32_to_f16(v[i]));
      ASSERT_EQ(got[i], want) << dtype_name(dt) << " element " << i;
    }
    fs::remove_all(dir);
  }
}

TEST(HfLlama, ExportThenImportGivesTheSameValues) {
  ASSERT_EQ(ModelSpec::load(test::source_path("tests/fixtures/hf-llama-tiny/config.json")).arch(), "llama");
  export_then_import(test::source_path("tests/fixtures/hf-llama-tiny/config.json"));
  for (const std::string& dir : family_dirs())  // and the family's own keys come back (shape_json equal)
    export_then_import(dir + "/config.json");
}

TEST(HfLlama, MismatchedWeightsAreRefusedWithTheTensorAndShapes) {
  const std::string dir = test::source_path("tests/fixtures/hf-llama-tiny");
  ModelSpec mha = ModelSpec::load(dir + "/config.json");
  mha.llama.n_kv_head = 4;  // the file has 2 kv heads
  std::string msg = error_of([&] { HfWeights w(dir, mha); });
  EXPECT_NE(msg.find("'model.layers.0.self_attn.k_proj.weight' has shape [16, 32], the model config needs [32, 32]"),
            std::string::npos)
      << msg;
  // GPT-2 names are not Llama's.
  msg = error_of([&] {
    HfWeights w(dir, gpt2_spec(GPT2Config::load(test::source_path("tests/fixtures/hf-gpt2-tiny/config.json"))));
  });
  EXPECT_NE(msg.find("have no tensor 'wte.weight'"), std::string::npos) << msg;
  // A Llama variant Strata does not compute is refused, not approximated.
  const std::string cfg_path = tmp("llama_config.json");
  std::ofstream(cfg_path) << R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 48,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 37, "max_position_embeddings": 16,
      "rope_scaling": {"type": "yarn", "factor": 2.0}})";
  msg = error_of([&] { ModelSpec::load(cfg_path); });
  EXPECT_NE(msg.find("rope_scaling"), std::string::npos) << msg;
  fs::remove(cfg_path);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// An export's config.json writes float settings as the source wrote them: 1e-06, not the
// float's 9.99999997e-07 (from_pretrained would read a different epsilon), and the dtype.
TEST(HfLlama, ExportedConfigWritesFloatsAsTheSourceDid) {
  const ModelSpec spec = ModelSpec::from_json_text(
      R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64,
          "rms_norm_eps": 1e-06, "rope_theta": 500000.0})",
      "test");
  const std::string j = spec.hf_config_json(DType::bf16);
  EXPECT_NE(j.find("\"rms_norm_eps\": 1e-06"), std::string::npos) << j;
  EXPECT_NE(j.find("\"rope_theta\": 500000.0"), std::string::npos) << j;
  EXPECT_NE(j.find("\"torch_dtype\": \"bfloat16\""), std::string::npos) << j;
}

// openai-community/gpt2's config.json and its copies carry GPT-1-era bookkeeping keys: they
// change nothing here and are accepted; a non-zero n_special would add rows and is refused.
TEST(HfGpt2, OlderConfigsBookkeepingKeysAreAccepted) {
  const std::string base = R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 100,
      "n_positions": 64, "n_ctx": 64, "n_special": 0, "predict_special_tokens": true, "_num_labels": 1,
      "output_past": true, "finetuning_task": null)";
  EXPECT_NO_THROW(GPT2Config::from_json_text(base + "}", "gpt2/config.json"));
  const std::string msg = test::error_of([&] { GPT2Config::from_json_text(base + R"(, "n_special": 3})", "x"); });
  EXPECT_NE(msg.find("n_special"), std::string::npos) << msg;
}

}  // namespace
}  // namespace strata
