// Starting low-rank adapters from an adapter directory PEFT saved (--lora-adapter DIR):
// adapter_config.json's r, lora_alpha, lora_dropout and target_modules become the run's
// LoRA options, and adapter_model.safetensors' lora_A and lora_B the adapters' initial values.
// What Strata does not run is refused with the key that asks for it (DoRA, rsLoRA, per-module
// ranks, trained biases, modules_to_save, target_modules as a regular expression).
#pragma once
#include <memory>
#include <string>

#include "core/flat_source.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/model_spec.h"

namespace strata {

struct LoraOptions;

// Sets o's rank, alpha, dropout and targets from DIR/adapter_config.json. A --lora-rank or
// --lora-targets already given must be the adapter's.
void apply_peft_adapter_config(const std::string& dir, LoraOptions& o);

// The adapters' initial values from DIR/adapter_model.safetensors, in lora_layout's order for
// `targets` (A [r, in], then B [out, r], per target). Every tensor must be there with its
// shape, and nothing else.
class PeftAdapterWeights final : public FlatSource {
 public:
  PeftAdapterWeights(const std::string& dir, const ModelSpec& spec, const std::vector<LoraTarget>& targets, int rank);
  void read(int64_t flat_begin, int64_t count, float* out) const override;

 private:
  struct Piece {
    int64_t flat_begin, count;
    const io::SafeTensor* tensor;
  };
  std::unique_ptr<io::SafetensorsFile> file_;
  std::vector<Piece> pieces_;  // in flat order
};

}  // namespace strata
