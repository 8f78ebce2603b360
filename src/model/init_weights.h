// A model's initial weights as `--init random` makes them (UnitModel::init_unit from a seed),
// as a FlatSource over the flat layout, a unit at a time: what `strata export --model CONFIG
// --init random` writes as a Hugging Face directory, so a large model can be stored once and
// fine-tuned from disk.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/flat_source.h"
#include "model/model.h"
#include "model/model_spec.h"

namespace strata {

class InitWeights final : public FlatSource {
 public:
  // backend: where the model (without weights, for one token) is built; it allocates only the
  // activations of that token.
  InitWeights(const ModelSpec& spec, Backend& backend, uint64_t seed);
  ~InitWeights() override;
  // Reads within one unit make that unit once; the last unit made is kept.
  void read(int64_t flat_begin, int64_t count, float* out) const override;

 private:
  uint64_t seed_;
  std::unique_ptr<UnitHooks> hooks_;
  std::unique_ptr<Model> model_;
  mutable int cached_ = -1;
  mutable std::vector<float> unit_;
};

}  // namespace strata
