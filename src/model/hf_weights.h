// Model weights in Hugging Face's format, named and laid out as each model family declares
// (model_family.h: GPT-2's "h.3.attn.c_attn.weight", optionally under "transformer.", with
// its Conv1D weights [in, out], the transpose of Strata's [out, in]; Llama's
// "model.layers.3.self_attn.q_proj.weight"; fused tensors such as Phi-3's qkv_proj), and the
// unpadded vocabulary. Reads a single model.safetensors or a sharded set listed by
// model.safetensors.index.json, in F32, BF16 or F16; writes the same naming.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/flat_source.h"
#include "io/safetensors.h"
#include "model/model_spec.h"

namespace strata {

// Whether a path is a Hugging Face model directory (config.json and safetensors weights).
bool is_hf_model_dir(const std::string& path);
// A model directory (config.json) without safetensors weights is an Error saying what to do
// (PyTorch's pytorch_model.bin: how to convert it) unless `random_init` (--init random).
void check_model_weights(const std::string& path, bool random_init);

// One Strata tensor and its Hugging Face counterpart.
struct HfTensor {
  std::string name;               // Hugging Face's name (without an optional prefix)
  std::vector<int64_t> hf_shape;  // as stored there
  int64_t offset, count;          // Strata's flat range
  int64_t rows, cols;             // Strata's shape (1-D: count × 1)
  bool transpose;                 // the HF layout is [cols, rows]
  int64_t hf_rows;                // rows present in the file (the unpadded vocabulary for embeddings)
};
std::vector<HfTensor> hf_tensor_table(const ModelSpec& spec);
// "[a, b]", for messages about a tensor's shape.
std::string shape_text(const std::vector<int64_t>& shape);

// Imported weights as a source over Strata's flat (unit-major) layout. Each read converts
// whole tensors one at a time (transposing where needed), so memory stays at one tensor.
// Names, shapes and dtypes are checked when the files are opened.
class HfWeights final : public FlatSource {
 public:
  // `path`: a model directory, a .safetensors file, or a model.safetensors.index.json.
  HfWeights(const std::string& path, const ModelSpec& spec);
  ~HfWeights() override;
  void read(int64_t flat_begin, int64_t count, float* out) const override;
  // What the import left out of the checkpoint, and why ("" when nothing).
  const std::string& note() const { return note_; }

 private:
  void load_tensor(size_t i) const;
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::vector<HfTensor> table_;
  std::vector<std::pair<int, const io::SafeTensor*>> found_;  // per table entry
  std::string note_;
  mutable size_t cached_ = size_t(-1);
  mutable std::vector<float> cache_, raw_;
};

}  // namespace strata
