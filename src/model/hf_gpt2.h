// GPT-2 weights in Hugging Face's format: names ("h.3.attn.c_attn.weight", optionally under
// "transformer."), Conv1D layouts ([in, out], the transpose of Strata's [out, in]) and the
// unpadded vocabulary. Reads a single model.safetensors or a sharded set listed by
// model.safetensors.index.json, in F32, BF16 or F16; writes the same naming.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/flat_source.h"
#include "io/safetensors.h"
#include "model/gpt2_config.h"

namespace strata {

// Whether a path is a Hugging Face model directory (config.json and safetensors weights) or
// a weights file.
bool is_hf_model_dir(const std::string& path);

// Imported weights as a source over Strata's flat (unit-major) GPT-2 layout. Each read
// converts whole tensors one at a time (transposing Conv1D weights), so memory stays at one
// tensor. Shapes and dtypes are checked when the files are opened.
class HfGpt2Weights final : public FlatSource {
 public:
  // `path`: a model directory, a .safetensors file, or a model.safetensors.index.json.
  HfGpt2Weights(const std::string& path, const GPT2Config& cfg);
  ~HfGpt2Weights() override;
  void read(int64_t flat_begin, int64_t count, float* out) const override;

 private:
  struct Entry;
  void load_tensor(size_t i) const;
  GPT2Config cfg_;
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::vector<Entry> entries_;  // in flat order
  mutable size_t cached_ = size_t(-1);
  mutable std::vector<float> cache_, raw_;
};

// Writes `weights` (Strata's flat layout) as Hugging Face GPT-2 safetensors: `out` ending in
// .safetensors is the file; otherwise a directory with model.safetensors and config.json.
void export_hf_gpt2(const GPT2Config& cfg, const FlatSource& weights, const std::string& out, DType dtype);

// Hugging Face's config.json for these shapes.
std::string hf_gpt2_config_text(const GPT2Config& cfg, DType dtype = DType::f32);

}  // namespace strata
