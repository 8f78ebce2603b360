// Gemma-2 (model_type gemma2): Gemma's layers (gemma.h) with soft-capped attention scores and
// logits, sliding and full layers alternating.
#include "model/families/gemma.h"

namespace strata {
namespace {

class Gemma2Family final : public GemmaFamily {
 public:
  std::string model_type() const override { return "gemma2"; }
  std::string display_name() const override { return "Gemma-2"; }
  std::string hf_architecture() const override { return "Gemma2ForCausalLM"; }

 protected:
  int default_sliding_pattern() const override { return 2; }
};

}  // namespace

const ModelFamily& gemma2_family() {
  static const Gemma2Family f;
  return f;
}

}  // namespace strata
