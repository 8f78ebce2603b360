#include "model/hf_gpt2.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "model/gpt2_params.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// HF's name for a unit-layout tensor, and whether its HF layout is the transpose of ours.
std::pair<std::string, bool> hf_name(const ParamSpec& s) {
  const std::string h = "h." + std::to_string(s.layer) + ".";
  switch (s.kind) {
    case GPT2Param::wte:
      return {"wte.weight", false};
    case GPT2Param::wpe:
      return {"wpe.weight", false};
    case GPT2Param::ln1w:
      return {h + "ln_1.weight", false};
    case GPT2Param::ln1b:
      return {h + "ln_1.bias", false};
    case GPT2Param::qkvw:
      return {h + "attn.c_attn.weight", true};
    case GPT2Param::qkvb:
      return {h + "attn.c_attn.bias", false};
    case GPT2Param::attprojw:
      return {h + "attn.c_proj.weight", true};
    case GPT2Param::attprojb:
      return {h + "attn.c_proj.bias", false};
    case GPT2Param::ln2w:
      return {h + "ln_2.weight", false};
    case GPT2Param::ln2b:
      return {h + "ln_2.bias", false};
    case GPT2Param::fcw:
      return {h + "mlp.c_fc.weight", true};
    case GPT2Param::fcb:
      return {h + "mlp.c_fc.bias", false};
    case GPT2Param::fcprojw:
      return {h + "mlp.c_proj.weight", true};
    case GPT2Param::fcprojb:
      return {h + "mlp.c_proj.bias", false};
    case GPT2Param::lnfw:
      return {"ln_f.weight", false};
    case GPT2Param::lnfb:
      return {"ln_f.bias", false};
    case GPT2Param::count:
      break;
  }
  return {"?", false};
}

// The HF shape of a tensor: Conv1D weights transposed, wte over the real vocabulary.
std::vector<int64_t> hf_shape(const ParamSpec& s, const GPT2Config& c, bool transpose) {
  std::vector<int64_t> shape(s.shape.dims.begin(), s.shape.dims.begin() + s.shape.rank);
  if (s.kind == GPT2Param::wte) shape[0] = c.vocab_size;
  if (transpose) std::swap(shape[0], shape[1]);
  return shape;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

bool ignorable(const std::string& name) {
  // Causal-mask buffers older exports carry, and the tied output head.
  auto ends = [&](const char* suffix) {
    const size_t n = std::strlen(suffix);
    return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || name == "lm_head.weight";
}

}  // namespace

struct HfGpt2Weights::Entry {
  std::string name;       // the name found in the files
  int64_t offset, count;  // Strata's flat range
  int64_t rows, cols;     // Strata's shape (2-D tensors)
  bool transpose;
  int file;
  const io::SafeTensor* tensor;
  bool wte;
};

bool is_hf_model_dir(const std::string& path) {
  return fs::is_directory(path) && fs::exists(fs::path(path) / "config.json") &&
         (fs::exists(fs::path(path) / "model.safetensors") ||
          fs::exists(fs::path(path) / "model.safetensors.index.json"));
}

HfGpt2Weights::HfGpt2Weights(const std::string& path, const GPT2Config& cfg) : cfg_(cfg) {
  fs::path p(path);
  if (fs::is_directory(p))
    p = fs::exists(p / "model.safetensors.index.json") ? p / "model.safetensors.index.json" : p / "model.safetensors";
  STRATA_CHECK(fs::exists(p), "weights '" + p.string() + "' not found",
               "give a Hugging Face model directory, a .safetensors file or a model.safetensors.index.json");
  std::map<std::string, int> file_of;  // tensor name -> index into files_
  if (p.filename() == "model.safetensors.index.json" || p.extension() == ".json") {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
    STRATA_CHECK(!j.is_discarded() && j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                 "'" + p.string() + "' is not a safetensors index (no weight_map object)",
                 "the index is corrupted: download it again");
    std::map<std::string, int> shard_index;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      STRATA_CHECK(it.value().is_string(), "'" + p.string() + "': weight_map." + it.key() + " is not a file name",
                   "the index is corrupted");
      const std::string shard = it.value().get<std::string>();
      STRATA_CHECK(shard.find('/') == std::string::npos && shard != "..",
                   "'" + p.string() + "': shard name '" + shard + "' is not a file in the index's directory",
                   "the index is corrupted");
      if (!shard_index.count(shard)) {
        shard_index[shard] = int(files_.size());
        files_.push_back(std::make_unique<io::SafetensorsFile>((p.parent_path() / shard).string()));
      }
      file_of[it.key()] = shard_index[shard];
    }
  } else {
    files_.push_back(std::make_unique<io::SafetensorsFile>(p.string()));
  }
  for (size_t fi = 0; fi < files_.size(); ++fi)
    for (const io::SafeTensor& t : files_[fi]->header().tensors)
      if (!file_of.count(t.name) || file_of[t.name] == int(fi)) file_of[t.name] = int(fi);

  std::set<std::string> used;
  int64_t offset = 0;
  for (const ParamSpec& s : gpt2_unit_layout(cfg)) {
    auto [name, transpose] = hf_name(s);
    std::string found = file_of.count(name) ? name : "transformer." + name;
    STRATA_CHECK(file_of.count(found), "weights '" + p.string() + "' have no tensor '" + name + "'",
                 "this is not a GPT-2 checkpoint for the model config (Hugging Face GPT-2 names expected)");
    const int fi = file_of[found];
    const io::SafeTensor& t = files_[size_t(fi)]->tensor(found);
    const std::vector<int64_t> want = hf_shape(s, cfg, transpose);
    STRATA_CHECK(t.shape == want,
                 "'" + files_[size_t(fi)]->path() + "', tensor '" + found + "' has shape " + shape_text(t.shape) +
                     ", the model config needs " + shape_text(want),
                 "the weights were written for a different model: use the config.json next to them");
    STRATA_CHECK(t.readable, "'" + files_[size_t(fi)]->path() + "', tensor '" + found + "' is " + t.dtype_name,
                 "Strata imports F32, BF16 and F16 weights");
    const int64_t count = s.shape.numel();
    entries_.push_back({found, offset, count, s.shape.rank == 2 ? s.shape.dims[0] : count,
                        s.shape.rank == 2 ? s.shape.dims[1] : 1, transpose, fi, &t, s.kind == GPT2Param::wte});
    used.insert(found);
    offset += count;
  }
  for (const auto& [name, fi] : file_of)
    STRATA_CHECK(used.count(name) || ignorable(name),
                 "'" + files_[size_t(fi)]->path() + "' holds tensor '" + name + "', which GPT-2 has no place for",
                 "the weights are for a different architecture or model config");
}

HfGpt2Weights::~HfGpt2Weights() = default;

void HfGpt2Weights::load_tensor(size_t i) const {
  if (cached_ == i) return;
  const Entry& e = entries_[i];
  const io::SafetensorsFile& f = *files_[size_t(e.file)];
  cache_.assign(size_t(e.count), 0.0f);  // wte's padded rows stay zero
  if (!e.transpose) {
    f.read_f32(*e.tensor, 0, std::span<float>(cache_.data(), size_t(e.tensor->numel())));
  } else {
    raw_.resize(size_t(e.count));
    f.read_f32(*e.tensor, 0, raw_);
    // HF [cols, rows] -> ours [rows, cols], in tiles so both sides stay in cache.
    constexpr int64_t tile = 64;
    for (int64_t c0 = 0; c0 < e.cols; c0 += tile)
      for (int64_t r0 = 0; r0 < e.rows; r0 += tile)
        for (int64_t c = c0; c < std::min(e.cols, c0 + tile); ++c)
          for (int64_t r = r0; r < std::min(e.rows, r0 + tile); ++r)
            cache_[size_t(r * e.cols + c)] = raw_[size_t(c * e.rows + r)];
  }
  cached_ = i;
}

void HfGpt2Weights::read(int64_t flat_begin, int64_t count, float* out) const {
  const int64_t end = flat_begin + count;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const int64_t lo = std::max(flat_begin, e.offset), hi = std::min(end, e.offset + e.count);
    if (lo >= hi) continue;
    load_tensor(i);
    std::memcpy(out + (lo - flat_begin), cache_.data() + (lo - e.offset), size_t(hi - lo) * 4);
  }
}

std::string hf_gpt2_config_text(const GPT2Config& c, DType dtype) {
  nlohmann::ordered_json j = {{"architectures", {"GPT2LMHeadModel"}},
                              {"model_type", "gpt2"},
                              {"activation_function", "gelu_new"},
                              {"layer_norm_epsilon", 1e-5},
                              {"n_layer", c.n_layer},
                              {"n_head", c.n_head},
                              {"n_embd", c.n_embd},
                              {"n_positions", c.max_seq_len},
                              {"n_ctx", c.max_seq_len},
                              {"vocab_size", c.vocab_size},
                              {"tie_word_embeddings", true},
                              {"torch_dtype", dtype == DType::f32    ? "float32"
                                              : dtype == DType::bf16 ? "bfloat16"
                                                                     : "float16"}};
  // Strata's own padding, when it is not the default (HF ignores the extra key).
  if (c.padded_vocab_size != (c.vocab_size + 63) / 64 * 64) j["padded_vocab_size"] = c.padded_vocab_size;
  return j.dump(2) + "\n";
}

void export_hf_gpt2(const GPT2Config& cfg, const FlatSource& weights, const std::string& out, DType dtype) {
  fs::path file(out);
  const bool dir = file.extension() != ".safetensors";
  if (dir) {
    std::error_code ec;
    fs::create_directories(file, ec);
    STRATA_CHECK(!ec, "cannot create '" + out + "': " + ec.message(), "check --out");
    file /= "model.safetensors";
  }
  const std::vector<ParamSpec> layout = gpt2_unit_layout(cfg);
  std::vector<io::SafetensorsWriter::Entry> table;
  for (const ParamSpec& s : layout) {
    auto [name, transpose] = hf_name(s);
    table.push_back({name, dtype, hf_shape(s, cfg, transpose)});
  }
  // Written under a temporary name and renamed, so a failed export never leaves a file
  // that looks complete.
  const std::string tmp = file.string() + ".tmp";
  {
    io::SafetensorsWriter w(tmp, table, {{"format", "pt"}, {"producer", "strata"}});
    std::vector<float> buf, t;
    int64_t offset = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
      const ParamSpec& s = layout[i];
      const int64_t n = s.shape.numel();
      buf.resize(size_t(n));
      weights.read(offset, n, buf.data());
      offset += n;
      const bool transpose = hf_name(s).second;
      int64_t keep = n;
      if (s.kind == GPT2Param::wte) keep = int64_t(cfg.vocab_size) * cfg.n_embd;  // drop the padded rows
      if (transpose) {
        const int64_t rows = s.shape.dims[0], cols = s.shape.dims[1];
        t.resize(size_t(n));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = buf[size_t(r * cols + c)];
        buf.swap(t);
      }
      w.write_f32(std::span<const float>(buf.data(), size_t(keep)), dtype);
    }
    w.finish();
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  STRATA_CHECK(!ec, "cannot rename '" + tmp + "' to '" + file.string() + "': " + ec.message(), "check the directory");
  if (dir) {
    std::ofstream c(fs::path(out) / "config.json");
    c << hf_gpt2_config_text(cfg, dtype);
    STRATA_CHECK(c.good(), "cannot write '" + out + "/config.json'", "check the directory and free space");
  }
}

}  // namespace strata
