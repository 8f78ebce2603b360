#include "model/hf_export.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/safetensors.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// The files of an export, each written under a temporary name; publish() renames them all
// into place once every one is complete, so a failed export (a full disk, say) leaves the
// directory's previous export as it was, and no file that looks complete.
class PendingFiles {
 public:
  ~PendingFiles() {
    if (published_) return;
    for (const fs::path& p : paths_) {
      std::error_code ec;
      fs::remove(tmp_of(p), ec);  // after a failure: what was written so far
    }
  }
  // The temporary name to write `path` under.
  std::string add(const fs::path& path) {
    paths_.push_back(path);
    return tmp_of(path);
  }
  // Renames every file into place.
  void publish() {
    for (const fs::path& p : paths_) {
      std::error_code ec;
      fs::rename(tmp_of(p), p, ec);
      STRATA_CHECK(!ec, "cannot rename '" + tmp_of(p) + "' to '" + p.string() + "': " + ec.message(),
                   "check the directory");
    }
    published_ = true;
  }
  // After publish(), in a directory export: removes the weight files of an earlier export that
  // this one did not replace (it may have been cut into other shards).
  void remove_other_weights(const fs::path& dir) const {
    std::set<std::string> ours;
    for (const fs::path& p : paths_) ours.insert(p.filename().string());
    std::vector<fs::path> stale;
    for (const auto& f : fs::directory_iterator(dir)) {
      const std::string name = f.path().filename().string();
      const bool weights = name == "model.safetensors" || name == "model.safetensors.index.json" ||
                           (name.starts_with("model-") && name.ends_with(".safetensors"));
      if (weights && !ours.count(name)) stale.push_back(f.path());
    }
    for (const fs::path& p : stale) {
      std::error_code ec;
      fs::remove(p, ec);
      STRATA_CHECK(!ec, "cannot remove '" + p.string() + "' of an earlier export: " + ec.message(),
                   "remove it by hand: the new export is complete");
    }
  }

 private:
  static std::string tmp_of(const fs::path& p) { return p.string() + ".tmp"; }
  std::vector<fs::path> paths_;
  bool published_ = false;
};

// Writes tensors [first, last) of the table into `tmp`.
void write_file(const std::string& tmp, const std::vector<HfTensor>& tensors, size_t first, size_t last,
                const FlatSource& weights, DType dtype) {
  std::vector<io::SafetensorsWriter::Entry> table;
  for (size_t i = first; i < last; ++i) table.push_back({tensors[i].name, dtype, tensors[i].hf_shape});
  {
    io::SafetensorsWriter w(tmp, table, {{"format", "pt"}, {"producer", "strata"}});
    std::vector<float> buf, t;
    for (size_t i = first; i < last; ++i) {
      const HfTensor& e = tensors[i];
      buf.resize(size_t(e.count));
      weights.read(e.offset, e.count, buf.data());
      if (e.transpose) {
        t.resize(size_t(e.count));
        for (int64_t r = 0; r < e.rows; ++r)
          for (int64_t c = 0; c < e.cols; ++c) t[size_t(c * e.rows + r)] = buf[size_t(r * e.cols + c)];
        buf.swap(t);
      }
      // Padded vocabulary rows are not written (hf_rows < rows only for untransposed embeddings).
      w.write_f32(std::span<const float>(buf.data(), size_t(e.hf_rows * e.cols)), dtype);
    }
    w.finish();
  }
}

size_t hf_bytes(const HfTensor& e, DType dtype) { return size_t(e.hf_rows * e.cols) * dtype_size(dtype); }

void write_text(const std::string& tmp, const std::string& text) {
  std::ofstream o(tmp);
  o << text;
  o.flush();
  STRATA_CHECK(o.good(), "cannot write '" + tmp + "'", "check the directory and free space");
}

}  // namespace

void export_hf(const ModelSpec& spec, const FlatSource& weights, const std::string& out, DType dtype,
               size_t max_shard_bytes) {
  STRATA_CHECK(max_shard_bytes > 0, "export: the shard size must be positive", "give --max-shard-size 5GB, say");
  const std::vector<HfTensor> tensors = hf_tensor_table(spec);
  const fs::path target(out);
  PendingFiles files;
  if (target.extension() == ".safetensors") {
    write_file(files.add(target), tensors, 0, tensors.size(), weights, dtype);
    files.publish();
    return;
  }
  std::error_code ec;
  fs::create_directories(target, ec);
  STRATA_CHECK(!ec, "cannot create '" + out + "': " + ec.message(), "check --out");
  // Shards as save_pretrained cuts them: tensors in order, a new shard when the next would
  // pass the limit.
  std::vector<size_t> starts = {0};
  size_t in_shard = 0, total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t b = hf_bytes(tensors[i], dtype);
    if (in_shard > 0 && in_shard + b > max_shard_bytes) starts.push_back(i), in_shard = 0;
    in_shard += b, total += b;
  }
  starts.push_back(tensors.size());
  const size_t n = starts.size() - 1;
  if (n == 1) {
    write_file(files.add(target / "model.safetensors"), tensors, 0, tensors.size(), weights, dtype);
  } else {
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (size_t k = 0; k < n; ++k) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, n);
      write_file(files.add(target / name), tensors, starts[k], starts[k + 1], weights, dtype);
      for (size_t i = starts[k]; i < starts[k + 1]; ++i) map[tensors[i].name] = name;
    }
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
    write_text(files.add(target / "model.safetensors.index.json"), index.dump(2) + "\n");
  }
  write_text(files.add(target / "config.json"), spec.hf_config_json(dtype));
  files.publish();
  files.remove_other_weights(target);
}

std::vector<std::string> carry_model_files(const std::string& source, const std::string& out) {
  const fs::path src(source), dst(out);
  if (!fs::is_directory(src)) return {"the source model directory '" + source + "' is gone: no tokenizer files copied"};
  std::vector<std::string> done;
  for (const char* f :
       {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
        "vocab.json", "merges.txt", "chat_template.jinja", "generation_config.json"}) {
    if (!fs::exists(src / f)) continue;
    std::error_code ec;
    fs::copy_file(src / f, dst / f, fs::copy_options::overwrite_existing, ec);
    STRATA_CHECK(!ec, "cannot copy '" + (src / f).string() + "' to '" + out + "': " + ec.message(),
                 "check the directory and free space");
    done.push_back(std::string("copied ") + f);
  }
  std::ifstream in(src / "config.json");
  const nlohmann::ordered_json from = nlohmann::ordered_json::parse(in, nullptr, false);
  if (from.is_discarded() || !from.is_object()) return done;
  std::ifstream cur(dst / "config.json");
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(cur, nullptr, false);
  cur.close();
  if (cfg.is_discarded() || !cfg.is_object()) return done;
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (from.contains(k)) cfg[k] = from[k], done.push_back(std::string("kept ") + k + " " + from[k].dump());
  std::ofstream o(dst / "config.json");
  o << cfg.dump(2) << "\n";
  STRATA_CHECK(o.good(), "cannot write '" + (dst / "config.json").string() + "'", "check the directory and free space");
  return done;
}

}  // namespace strata
