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
  // transformers' Gemma2Config defaults: Gemma-2 2B, which released configs leave out in part.
  void set_defaults(LlamaConfig& c) const override {
    GemmaFamily::set_defaults(c);
    c.vocab_size = 256000, c.n_embd = 2304, c.intermediate = 9216, c.n_layer = 26, c.n_head = 8, c.n_kv_head = 4;
    c.head_dim_key = 256, c.max_seq_len = 8192, c.rms_eps = 1e-6f, c.sliding_window_key = 4096;
    c.attn_softcap = 50.0f, c.final_softcap = 30.0f;
  }

 protected:
  int default_sliding_pattern() const override { return 2; }
};

}  // namespace

const ModelFamily& gemma2_family() {
  static const Gemma2Family f;
  return f;
}

}  // namespace strata
