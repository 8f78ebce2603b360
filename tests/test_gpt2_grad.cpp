// Every parameter's gradient against central finite differences, on a tiny GPT-2 in f32.
//
// Tolerance: |g - fd| <= 2e-4 + 2e-2·|fd| per element, with h = 1e-2 on weights of scale
// ~0.2. Central differences have O(h²) truncation error and f32 forward noise of ~1e-7/h;
// a wrong gradient path is off by O(|g|), far outside this band.
#include <cstring>

#include "cpu/cpu_backend.h"
#include "test_util.h"

namespace strata {
namespace {

TEST(GPT2Gradients, EveryParameterMatchesFiniteDifferences) {
  cpu::CpuBackend be({size_t(1) << 30, 0});
  const GPT2Config cfg = test::tiny_config();
  const int B = 2, T = 8;
  GPT2 model(be, cfg, B, T, DType::f32);
  // Random everything (norm weights around 1, biases non-zero) so every path carries signal.
  NormalRng rng(42, 0);
  float* p = model.master_flat().as<float>();
  for (int64_t i = 0; i < model.num_params(); ++i) p[i] = 0.2f * rng.next();
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const GPT2Param kind = model.param_specs()[k].kind;
    if (kind != GPT2Param::ln1w && kind != GPT2Param::ln2w && kind != GPT2Param::lnfw) continue;
    TensorView w = model.master(int(k));
    for (int64_t i = 0; i < w.numel(); ++i) w.as<float>()[i] += 1.0f;
  }
  auto tokens = test::random_tokens(size_t(B * T), cfg.vocab_size, 1);
  auto targets = test::random_tokens(size_t(B * T), cfg.vocab_size, 2);
  targets[3] = -1;  // a masked position must contribute nothing

  model.zero_grad();
  model.forward(tokens);
  const double loss0 = test::reference_loss(model.logits().as<float>(), targets, cfg.vocab_size, cfg.padded_vocab_size);
  const double loss_bw = model.backward(targets, 1.0f);
  EXPECT_NEAR(loss_bw, loss0, 1e-5 * loss0);
  std::vector<float> grad(model.grad_flat().as<float>(), model.grad_flat().as<float>() + model.num_params());

  auto loss_at = [&]() {
    model.forward(tokens);
    return test::reference_loss(model.logits().as<float>(), targets, cfg.vocab_size, cfg.padded_vocab_size);
  };
  const float h = 1e-2f;
  for (size_t k = 0; k < model.param_specs().size(); ++k) {
    const auto& spec = model.param_specs()[k];
    const int64_t off = model.param_offset(int(k)), n = spec.shape.numel();
    std::vector<float> fd(static_cast<size_t>(n)), an(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float& w = p[off + i];
      const float saved = w;
      w = saved + h;
      const double up = loss_at();
      w = saved - h;
      const double down = loss_at();
      w = saved;
      fd[size_t(i)] = float((up - down) / (2.0 * double(h)));
      an[size_t(i)] = grad[size_t(off + i)];
    }
    test::expect_close(an.data(), fd.data(), size_t(n), 2e-4, 2e-2, "gradient of " + spec.name);
  }
}

}  // namespace
}  // namespace strata
