// Every parameter's gradient against central finite differences, on a tiny GPT-2 in f32.
//
// Tolerance: |g - fd| <= 2e-4 + 2e-2·|fd| per element, with h = 1e-2 on weights of scale
// ~0.2. Central differences have O(h²) truncation error and f32 forward noise of ~1e-7/h;
// a wrong gradient path is off by O(|g|), far outside this band.
#include <cstring>
#include <string>

#include "cpu/cpu_backend.h"
#include "test_util.h"

namespace strata {
namespace {

void check_gradients(const GPT2Config& cfg, bool training, const std::string& what, float h = 1e-2f) {
  cpu::CpuBackend be({size_t(1) << 30, 0});
  const int B = 2, T = 8;
  GPT2 model(be, cfg, B, T, DType::f32);
  // Random everything (norm weights around 1, biases non-zero) so every path carries signal.
  NormalRng rng(42, 0);
  std::vector<float> p(size_t(model.num_params()));
  for (int64_t i = 0; i < model.num_params(); ++i) p[size_t(i)] = 0.2f * rng.next();
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const GPT2Param kind = gpt2_kind(model.param_specs()[k]);
    if (kind != GPT2Param::ln1w && kind != GPT2Param::ln2w && kind != GPT2Param::lnfw) continue;
    for (int64_t i = 0; i < model.param_specs()[k].shape.numel(); ++i)
      p[size_t(model.param_offset(int(k)) + i)] += 1.0f;
  }
  be.upload(model.master_flat().data, p.data(), p.size() * 4);
  if (training) model.set_dropout_rows(/*seed=*/7, /*first_sample=*/3);
  test::expect_gradients_match_finite_differences(model, B, T, cfg.vocab_size, cfg.padded_vocab_size, what, h);
}

TEST(GPT2Gradients, EveryParameterMatchesFiniteDifferences) { check_gradients(test::tiny_config(), false, ""); }

// Dropout on the embeddings, the attention probabilities and both projections: its masks
// are regenerated (not stored) in the backward, and each forward of the finite differences
// draws the same ones, so the loss is a fixed function of the weights to differentiate.
// The 1/(1-p) factors sharpen its curvature: h = 3e-3 (the truncation error goes as h²).
TEST(GPT2Gradients, WithDropoutEveryParameterMatchesFiniteDifferences) {
  GPT2Config cfg = test::tiny_config();
  cfg.embd_pdrop = 0.1f, cfg.attn_pdrop = 0.2f, cfg.resid_pdrop = 0.3f;
  check_gradients(cfg, true, "dropout: ", 3e-3f);
}

}  // namespace
}  // namespace strata
