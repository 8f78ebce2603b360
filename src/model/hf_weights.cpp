#include "model/hf_weights.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

namespace {}  // namespace

std::vector<HfTensor> hf_tensor_table(const ModelSpec& spec) {
  std::vector<HfTensor> out;
  int64_t offset = 0;
  for (const ParamSpec& s : spec.family->unit_layout(spec)) {
    const HfName n = spec.family->hf_name(spec, s);
    const int64_t count = s.shape.numel(), rows = s.shape.rank == 2 ? s.shape.dims[0] : count,
                  cols = s.shape.rank == 2 ? s.shape.dims[1] : 1;
    if (!out.empty() && out.back().name == n.name) {  // a fused HF tensor: this one's rows follow
      HfTensor& t = out.back();
      STRATA_CHECK(t.cols == cols && !t.transpose && !n.transposed && !n.vocab_rows,
                   "Hugging Face tensor '" + n.name + "' fuses tensors of different widths",
                   "this is a bug in the model family's names");
      t.count += count, t.rows += rows, t.hf_rows += rows;
      t.hf_shape[0] += rows;
    } else {
      HfTensor t;
      t.name = n.name, t.offset = offset, t.count = count, t.rows = rows, t.cols = cols, t.transpose = n.transposed;
      t.hf_rows = n.vocab_rows ? spec.vocab_size() : t.rows;
      if (s.shape.rank == 2)
        t.hf_shape = n.transposed ? std::vector<int64_t>{t.cols, t.hf_rows} : std::vector<int64_t>{t.hf_rows, t.cols};
      else
        t.hf_shape = {t.count};
      out.push_back(t);
    }
    offset += count;
  }
  return out;
}

bool is_hf_model_dir(const std::string& path) {
  return fs::is_directory(path) && fs::exists(fs::path(path) / "config.json") &&
         (fs::exists(fs::path(path) / "model.safetensors") ||
          fs::exists(fs::path(path) / "model.safetensors.index.json"));
}

void check_model_weights(const std::string& path, bool random_init) {
  if (random_init || !fs::is_directory(path) || is_hf_model_dir(path)) return;
  const fs::path p(path);
  if (fs::exists(p / "pytorch_model.bin") || fs::exists(p / "pytorch_model.bin.index.json"))
    throw_error("model directory '" + path + "' has PyTorch weights (pytorch_model.bin) but no safetensors",
                "convert them once with transformers: python3 -c \"from transformers import AutoModelForCausalLM as M; "
                "M.from_pretrained('" +
                    path + "').save_pretrained('" + path +
                    "', safe_serialization=True)\" (or pass --init random to train from random weights)");
  throw_error("model directory '" + path + "' has config.json but no weights (model.safetensors or " +
                  "model.safetensors.index.json)",
              "download the weights into it, or pass --init random to train the architecture from random weights");
}

HfWeights::HfWeights(const std::string& path, const ModelSpec& spec) : table_(hf_tensor_table(spec)) {
  fs::path p(path);
  if (fs::is_directory(p))
    p = fs::exists(p / "model.safetensors.index.json") ? p / "model.safetensors.index.json" : p / "model.safetensors";
  STRATA_CHECK(fs::exists(p), "weights '" + p.string() + "' not found",
               "give a Hugging Face model directory, a .safetensors file or a model.safetensors.index.json");
  std::map<std::string, int> file_of;  // tensor name -> index into files_
  if (p.extension() == ".json") {
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
      STRATA_CHECK(shard.find('/') == std::string::npos && !shard.empty() && shard[0] != '.',
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
      if (!file_of.count(t.name)) file_of[t.name] = int(fi);

  std::set<std::string> used;
  const std::string arch_name = spec.family->display_name();
  for (const HfTensor& e : table_) {
    std::string found = e.name;
    for (const std::string& alias : spec.family->hf_aliases(e.name))
      if (!file_of.count(found) && file_of.count(alias)) found = alias;
    STRATA_CHECK(file_of.count(found), "weights '" + p.string() + "' have no tensor '" + e.name + "'",
                 "this is not a " + arch_name + " checkpoint for the model config (Hugging Face names expected)");
    const int fi = file_of[found];
    const io::SafeTensor& t = files_[size_t(fi)]->tensor(found);
    STRATA_CHECK(t.shape == e.hf_shape,
                 "'" + files_[size_t(fi)]->path() + "', tensor '" + found + "' has shape " + shape_text(t.shape) +
                     ", the model config needs " + shape_text(e.hf_shape),
                 "the weights were written for a different model: use the config.json next to them");
    STRATA_CHECK(t.readable, "'" + files_[size_t(fi)]->path() + "', tensor '" + found + "' is " + t.dtype_name,
                 "Strata imports F32, BF16 and F16 weights");
    found_.emplace_back(fi, &t);
    used.insert(found);
  }
  std::map<std::string, int> left_out;  // part -> tensors
  for (const auto& [name, fi] : file_of) {
    if (!used.count(name))
      if (const std::string part = spec.family->hf_left_out(name); !part.empty()) {
        ++left_out[part];
        continue;
      }
    STRATA_CHECK(
        used.count(name) || spec.family->hf_ignorable(spec, name),
        "'" + files_[size_t(fi)]->path() + "' holds tensor '" + name + "', which " + arch_name + " has no place for",
        "the weights are for a different architecture or model config");
  }
  for (const auto& [part, n] : left_out)
    note_ += (note_.empty() ? "" : "; ") + std::string("left out ") + std::to_string(n) + " tensors of " + part;
}

HfWeights::~HfWeights() = default;

void HfWeights::load_tensor(size_t i) const {
  if (cached_ == i) return;
  const HfTensor& e = table_[i];
  const io::SafetensorsFile& f = *files_[size_t(found_[i].first)];
  const io::SafeTensor& t = *found_[i].second;
  cache_.assign(size_t(e.count), 0.0f);  // padded vocabulary rows stay zero
  if (!e.transpose) {
    f.read_f32(t, 0, std::span<float>(cache_.data(), size_t(t.numel())));
  } else {
    raw_.resize(size_t(e.count));
    f.read_f32(t, 0, raw_);
    // HF [cols, rows] -> Strata's [rows, cols], in tiles so both sides stay in cache.
    constexpr int64_t tile = 64;
    for (int64_t c0 = 0; c0 < e.cols; c0 += tile)
      for (int64_t r0 = 0; r0 < e.rows; r0 += tile)
        for (int64_t c = c0; c < std::min(e.cols, c0 + tile); ++c)
          for (int64_t r = r0; r < std::min(e.rows, r0 + tile); ++r)
            cache_[size_t(r * e.cols + c)] = raw_[size_t(c * e.rows + r)];
  }
  cached_ = i;
}

void HfWeights::read(int64_t flat_begin, int64_t count, float* out) const {
  const int64_t end = flat_begin + count;
  for (size_t i = 0; i < table_.size(); ++i) {
    const HfTensor& e = table_[i];
    const int64_t lo = std::max(flat_begin, e.offset), hi = std::min(end, e.offset + e.count);
    if (lo >= hi) continue;
    load_tensor(i);
    std::memcpy(out + (lo - flat_begin), cache_.data() + (lo - e.offset), size_t(hi - lo) * 4);
  }
}

}  // namespace strata
