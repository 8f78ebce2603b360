// Logits, loss and every parameter gradient against PyTorch (float64 reference written op by
// op in tests/tools/make_gpt2_fixture.py; fixtures committed, CI needs no torch).
//
// Tolerances (|got - ref| <= atol + rtol·|ref|):
//   f32 : logits 1e-5 + 1e-4·|ref|, loss 1e-5 relative, grads 1e-5 + 1e-3·|ref|
//   bf16: logits 2e-2·max|ref| + 3e-2·|ref|, loss 1e-2 relative, grads 1e-2·max|ref| + 1e-1·|ref|
//         (bf16 keeps 8 mantissa bits: ~4e-3 relative per rounding, compounded over layers;
//          measured: relative rms error of the logits ~0.9%)
#include <cstdio>
#include <cstring>
#include <fstream>

#include "cpu/cpu_backend.h"
#include "test_util.h"

namespace strata {
namespace {

struct Fixture {
  GPT2Config cfg;
  int B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<float> params, logits, grads;
  double loss = 0;
};

Fixture load_fixture(const std::string& name) {
  std::ifstream f(test::source_path("tests/fixtures/" + name), std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture: run tests/tools/make_gpt2_fixture.py";
  int32_t head[10];
  f.read(reinterpret_cast<char*>(head), sizeof head);
  EXPECT_EQ(head[0], 0x53545231) << "bad fixture magic";
  EXPECT_EQ(head[1], 1) << "fixture version";
  Fixture x;
  x.cfg.n_layer = head[2], x.cfg.n_head = head[3], x.cfg.n_embd = head[4], x.cfg.vocab_size = head[5];
  x.cfg.padded_vocab_size = head[6], x.cfg.max_seq_len = head[7];
  x.B = head[8], x.T = head[9];
  const size_t BT = size_t(x.B * x.T);
  const size_t N = size_t(x.cfg.num_params());
  auto rd = [&](auto& v, size_t n) {
    v.resize(n);
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(v[0])));
  };
  rd(x.tokens, BT);
  rd(x.targets, BT);
  rd(x.params, N);
  rd(x.logits, BT * size_t(x.cfg.padded_vocab_size));
  f.read(reinterpret_cast<char*>(&x.loss), 8);
  rd(x.grads, N);
  EXPECT_TRUE(f.good()) << "fixture truncated";
  return x;
}

void run_against_fixture(const std::string& name, DType dtype, double logit_atol_frac, double logit_rtol,
                         double loss_rtol, double grad_atol_frac, double grad_rtol) {
  const Fixture x = load_fixture(name);
  cpu::CpuBackend be({size_t(1) << 30, 0});
  GPT2 model(be, x.cfg, x.B, x.T, dtype);
  model.import_llmc_params(x.params);  // the fixture is in llm.c's order
  model.zero_grad();
  model.forward(x.tokens);
  double max_logit = 0;
  for (float v : x.logits) max_logit = std::max(max_logit, double(std::fabs(v)));
  test::expect_close(test::download_f32(be, model.logits()).data(), x.logits.data(), x.logits.size(),
                     std::max(1e-5, logit_atol_frac * max_logit), logit_rtol, "logits");
  const double loss = backward_loss(model, x.targets, 1.0f);
  EXPECT_NEAR(loss, x.loss, loss_rtol * x.loss) << "loss";
  std::vector<float> grads(x.grads.size());
  model.export_llmc_grads(grads);
  size_t off = 0;
  for (const ParamSpec& spec : gpt2_param_specs(x.cfg)) {
    const auto n = size_t(spec.shape.numel());
    double max_ref = 0;
    for (size_t i = 0; i < n; ++i) max_ref = std::max(max_ref, double(std::fabs(x.grads[off + i])));
    test::expect_close(grads.data() + off, x.grads.data() + off, n, std::max(1e-5, grad_atol_frac * max_ref), grad_rtol,
                       "grad " + spec.name);
    off += n;
  }
}

TEST(GPT2Torch, F32MatchesPyTorch) { run_against_fixture("gpt2_tiny.bin", DType::f32, 0.0, 1e-4, 1e-5, 0.0, 1e-3); }

TEST(GPT2Torch, Bf16MatchesPyTorchWithinBf16Tolerance) {
  run_against_fixture("gpt2_tiny.bin", DType::bf16, 2e-2, 3e-2, 1e-2, 1e-2, 1e-1);
}

// The same model with one 64-wide head over 64 positions: on a CPU with AMX its bf16
// attention runs on tiles (cpu/attention_amx.h), probabilities and dS rounded to bf16.
TEST(GPT2Torch, WholeTileHeadsF32MatchesPyTorch) {
  run_against_fixture("gpt2_tiny_tiles.bin", DType::f32, 0.0, 1e-4, 1e-5, 0.0, 1e-3);
}

TEST(GPT2Torch, WholeTileHeadsBf16MatchesPyTorchWithinBf16Tolerance) {
  run_against_fixture("gpt2_tiny_tiles.bin", DType::bf16, 2e-2, 3e-2, 1e-2, 1e-2, 1e-1);
}

}  // namespace
}  // namespace strata
