// `strata export --merge`: an adapter checkpoint's adapters folded into the frozen weights
// they were trained on, W + (alpha / r)·B·A for every target, as a FlatSource over the model's
// flat layout that export_hf writes like any model. The base is checked against the
// checksum the checkpoint recorded.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/flat_source.h"
#include "model/lora.h"
#include "model/model_spec.h"
#include "train/checkpoint_manifest.h"

namespace strata {

// The adapters' options a checkpoint was trained with.
LoraConfig lora_config_of(const CheckpointManifest& m);

class LoraMerged final : public FlatSource {
 public:
  // base: the frozen weights (f32, flat layout); adapters: the checkpoint's master (lora_layout
  // order). Reads every adapter into memory (they are small) and, when the manifest has one,
  // checks base's checksum, which reads the base once.
  LoraMerged(const CheckpointManifest& m, const ModelSpec& spec, const FlatSource& base, const FlatSource& adapters);
  void read(int64_t flat_begin, int64_t count, float* out) const override;

 private:
  const FlatSource& base_;
  std::vector<LoraTarget> targets_;
  std::vector<int64_t> offsets_;           // per target: its first base tensor's flat offset
  std::vector<std::vector<float>> a_, b_;  // per target: A [r, in], B [out, r]
  int rank_ = 0;
  float scale_ = 0;
};

}  // namespace strata
