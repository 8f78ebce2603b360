// Low-rank adapters in a model over frozen weights, on all linear layers of a tiny Llama
// (grouped-query attention, fused q|k|v and gate|up) and a tiny GPT-2 (c_fc before its GELU):
// zero B leaves the model as it was; the adapted model computes the merged weights
// W + (alpha/r)·B·A; the adapters' gradients match central finite differences; the frozen
// weights get none; dropout on the adapters' input repeats itself.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cpu/cpu_backend.h"
#include "model/gpt2.h"
#include "model/llama.h"
#include "model/model_spec.h"
#include "test_util.h"

namespace strata {
namespace {

constexpr int kB = 2, kT = 8;

LlamaConfig tiny_llama() {
  std::ifstream f(test::source_path("configs/llama-tiny.json"));
  std::stringstream ss;
  ss << f.rdbuf();
  return LlamaConfig::from_json_text(ss.str(), "configs/llama-tiny.json");
}

ModelStorage frozen() {
  ModelStorage s;
  s.grads = false, s.frozen = true;
  return s;
}

std::vector<float> logits_of(Backend& be, Model& m, const std::vector<int32_t>& tokens) {
  m.forward(tokens);
  return test::download_f32(be, m.logits());
}

// The model with all-linear adapters of rank 3 (alpha 6), its adapters set to `scale`-sized
// random values (B too, so they matter); and the base alone with the merged weights.
template <typename M, typename Config>
struct Pair {
  Pair(Backend& be, const Config& cfg, const ModelSpec& spec, float scale, double dropout = 0)
      : adapted(be, cfg, kB, kT, DType::f32, frozen()), merged(be, cfg, kB, kT, DType::f32) {
    adapted.init_weights(3), merged.init_weights(3);
    LoraConfig lora{3, 6.0, dropout, {"all-linear"}};
    adapted.attach_lora(lora_targets(spec, lora), lora, {});
    LoraAdapters& ad = *adapted.lora();
    ad.params().init([&](int u, float* dst) { ad.init_unit(u, 7, dst); });
    std::vector<float> p = test::download_f32(be, ad.params().master_flat());
    NormalRng rng(11, 0);
    for (float& x : p) x += scale * rng.next();
    be.upload(ad.params().master_flat().data, p.data(), p.size() * 4);
    // W + s·B·A on each target's rows (its specs are consecutive in the flat layout).
    std::vector<float> w = test::download_f32(be, merged.master_flat());
    const double s = lora.scaling();
    for (int t = 0; t < int(ad.targets().size()); ++t) {
      const LoraTarget& g = ad.targets()[size_t(t)];
      const std::vector<float> a = test::download_f32(be, ad.params().master(2 * t));
      const std::vector<float> b = test::download_f32(be, ad.params().master(2 * t + 1));
      const int64_t at = merged.param_offset(g.first_spec);
      for (int64_t o = 0; o < g.out; ++o)
        for (int64_t c = 0; c < g.in; ++c) {
          double d = 0;
          for (int k = 0; k < 3; ++k) d += double(b[size_t(o * 3 + k)]) * a[size_t(k * g.in + c)];
          w[size_t(at + o * g.in + c)] += float(s * d);
        }
    }
    be.upload(merged.master_flat().data, w.data(), w.size() * 4);
  }
  M adapted, merged;
};

template <typename M, typename Config>
void check_family(const Config& cfg, const ModelSpec& spec, int vocab, int padded_vocab, const char* what) {
  SCOPED_TRACE(what);
  cpu::CpuBackend be({size_t(1) << 30, 0});
  const auto tokens = test::random_tokens(size_t(kB * kT), vocab, 1);
  auto targets = test::random_tokens(size_t(kB * kT), vocab, 2);
  targets[3] = -1;
  {  // B = 0 (PEFT's start): the base model's logits, bit for bit
    Pair<M, Config> p(be, cfg, spec, 0.0f);
    M base(be, cfg, kB, kT, DType::f32);
    base.init_weights(3);
    EXPECT_EQ(logits_of(be, p.adapted, tokens), logits_of(be, base, tokens));
  }
  Pair<M, Config> p(be, cfg, spec, 0.2f);
  const auto la = logits_of(be, p.adapted, tokens), lm = logits_of(be, p.merged, tokens);
  test::expect_close(la.data(), lm.data(), la.size(), 2e-5, 1e-4, "adapted against merged logits");
  // The adapters' gradients against central differences of the loss (the base has none).
  LoraAdapters& ad = *p.adapted.lora();
  ad.params().zero_grad();
  p.adapted.forward(tokens);
  backward_loss(p.adapted, targets, 1.0f);
  const std::vector<float> grad = test::download_f32(be, ad.params().grad_flat());
  std::vector<float> master = test::download_f32(be, ad.params().master_flat());
  const float h = 3e-3f;  // the adapters curve the loss: h² truncation stays inside the tolerance
  auto loss_at = [&] {
    p.adapted.forward(tokens);
    return test::reference_loss(test::download_f32(be, p.adapted.logits()).data(), targets, vocab, padded_vocab);
  };
  Rng pick(5, 0);
  double worst = 0;
  for (int k = 0; k < 60; ++k) {
    const int64_t i = int64_t(pick.below(uint64_t(master.size())));
    const float saved = master[size_t(i)];
    float v = saved + h;
    be.upload(ad.params().master_flat().as<float>() + i, &v, 4);
    const double up = loss_at();
    v = saved - h;
    be.upload(ad.params().master_flat().as<float>() + i, &v, 4);
    const double down = loss_at();
    be.upload(ad.params().master_flat().as<float>() + i, &saved, 4);
    const double fd = (up - down) / (2 * h);
    EXPECT_NEAR(grad[size_t(i)], fd, 2e-4 + 2e-2 * std::fabs(fd)) << "adapter element " << i;
    worst = std::max(worst, std::fabs(grad[size_t(i)] - fd));
  }
  EXPECT_EQ(p.adapted.grad_bytes(), 0u);  // the frozen weights keep no gradient
}

TEST(LoraModel, LlamaAdaptersMatchTheMergedWeightsAndFiniteDifferences) {
  const LlamaConfig cfg = tiny_llama();
  const ModelSpec spec = ModelSpec::load(test::source_path("configs/llama-tiny.json"));
  check_family<Llama>(cfg, spec, cfg.vocab_size, cfg.padded_vocab_size, "Llama");
}

TEST(LoraModel, Gpt2AdaptersMatchTheMergedWeightsAndFiniteDifferences) {
  const GPT2Config cfg = test::tiny_config();
  const ModelSpec spec = ModelSpec::load(test::source_path("configs/gpt2-tiny.json"));
  check_family<GPT2>(cfg, spec, cfg.vocab_size, cfg.padded_vocab_size, "GPT-2");
}

// Dropout on the adapters' input: the same rows give the same masks (forward and the
// backward's recompute), other rows others, and evaluation none.
TEST(LoraModel, AdapterDropoutIsDrawnFromTheRows) {
  const LlamaConfig cfg = tiny_llama();
  const ModelSpec spec = ModelSpec::load(test::source_path("configs/llama-tiny.json"));
  cpu::CpuBackend be({size_t(1) << 30, 0});
  Pair<Llama, LlamaConfig> p(be, cfg, spec, 0.3f, /*dropout=*/0.5);
  const auto tokens = test::random_tokens(size_t(kB * kT), cfg.vocab_size, 1);
  const auto plain = logits_of(be, p.adapted, tokens);  // no set_dropout_rows yet: no dropout
  p.adapted.set_dropout_rows(1, 100);
  const auto first = logits_of(be, p.adapted, tokens);
  EXPECT_EQ(first, logits_of(be, p.adapted, tokens));
  EXPECT_NE(first, plain);
  p.adapted.set_dropout_rows(1, 200);
  EXPECT_NE(first, logits_of(be, p.adapted, tokens));
}

}  // namespace
}  // namespace strata
