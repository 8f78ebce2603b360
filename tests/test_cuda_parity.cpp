// Every op of the CUDA backend against the CPU backend (the reference, cpu/ops.h), on the
// same random inputs, in f32 and bf16. Skipped, with the reason, where no GPU exists; the
// code still compiles and links wherever nvcc is found (CI), and the kernels' element math
// is tested on the host by test_kernel_math.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "cpu/cpu_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_ops.h"
#include "kernels/math/qk_norm_math.h"

namespace strata {
namespace {

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  NormalRng r(seed, 0);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * r.next();
  return v;
}

// One tensor on both backends, filled with the same values (rounded to its dtype).
struct Pair {
  Buffer cpu, gpu;
  DType t;
  Shape s;
  TensorView c() const { return cpu.view(t, s); }
  TensorView g() const { return gpu.view(t, s); }
};

class CudaParity : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device here (" << why << ")";
    gpu_ = std::make_unique<cuda::CudaBackend>(cuda::CudaBackendOptions{size_t(2) << 30, 0});
  }
  Pair make(const std::vector<float>& v, DType t, Shape s) {
    Pair p{cpu_.allocate(v.size() * dtype_size(t), "cpu"), gpu_->allocate(v.size() * dtype_size(t), "gpu"), t, s};
    convert(p.cpu.data(), t, v.data(), DType::f32, v.size());
    gpu_->upload(p.gpu.data(), p.cpu.data(), v.size() * dtype_size(t));
    return p;
  }
  Pair randp(DType t, Shape s, uint64_t seed, float scale = 1.0f) {
    return make(randn(size_t(s.numel()), seed, scale), t, s);
  }
  std::vector<float> host(const Buffer& b, DType t, size_t n, bool from_gpu) {
    std::vector<uint8_t> raw(n * dtype_size(t));
    if (from_gpu) {
      gpu_->download(raw.data(), b.data(), raw.size());
    } else {
      std::memcpy(raw.data(), b.data(), raw.size());
    }
    std::vector<float> out(n);
    convert(out.data(), DType::f32, raw.data(), t, n);
    return out;
  }
  // ‖gpu − cpu‖ / ‖cpu‖ under tol (METHOD.md's measure), and no NaN where the CPU has none.
  void expect_match(const Pair& p, double tol, const char* what) {
    const size_t n = size_t(p.s.numel());
    auto a = host(p.cpu, p.t, n, false), b = host(p.gpu, p.t, n, true);
    double num = 0, den = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::isnan(a[i]), std::isnan(b[i])) << what << " element " << i;
      if (std::isnan(a[i])) continue;
      num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), den += double(a[i]) * a[i];
    }
    EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), tol) << what << " (" << dtype_name(p.t) << ")";
  }
  double tol(DType t) const { return t == DType::f32 ? 1e-5 : 1e-2; }
  cpu::CpuBackend cpu_{{size_t(2) << 30, 0, /*opaque=*/false}};
  std::unique_ptr<cuda::CudaBackend> gpu_;
};

const DType kActs[] = {DType::f32, DType::bf16};

TEST_F(CudaParity, CastAndConvertMatchBitForBit) {
  const int64_t n = 100003;
  auto v = randn(size_t(n), 3, 100.0f);
  v[0] = INFINITY, v[1] = -INFINITY, v[2] = NAN, v[3] = 65520.0f, v[4] = 0x1p-25f;
  Pair src = make(v, DType::f32, {n});
  for (DType t : {DType::bf16, DType::f16}) {
    Pair dst = randp(t, {n}, 4);
    cpu_.cast(dst.c(), src.c());
    gpu_->cast(dst.g(), src.g());
    auto a = host(dst.cpu, t, size_t(n), false), b = host(dst.gpu, t, size_t(n), true);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(a[size_t(i)])) continue;
      ASSERT_EQ(a[size_t(i)], b[size_t(i)]) << dtype_name(t) << " " << i;
    }
    Pair acc = randp(t, {n}, 5);  // the engine's accumulate: dst = round(dst + src)
    cpu_.convert(acc.cpu.data(), t, src.cpu.data(), DType::f32, n, true, cpu_.compute_stream());
    gpu_->convert(acc.gpu.data(), t, src.gpu.data(), DType::f32, n, true, gpu_->compute_stream());
    expect_match(acc, 0, "accumulate");
  }
}

TEST_F(CudaParity, ElementwiseOps) {
  for (DType t : kActs) {
    const int64_t N = 37, C = 96;
    Pair a = randp(t, {N, C}, 1), b = randp(t, {N, C}, 2), out = randp(t, {N, C}, 3);
    cpu_.residual_forward(out.c(), a.c(), b.c());
    gpu_->residual_forward(out.g(), a.g(), b.g());
    expect_match(out, tol(t), "residual");
    cpu_.scale(out.c(), 1.7f);
    gpu_->scale(out.g(), 1.7f);
    expect_match(out, tol(t), "scale");
    cpu_.gelu_forward(out.c(), a.c());
    gpu_->gelu_forward(out.g(), a.g());
    expect_match(out, tol(t), "gelu");
    cpu_.gelu_backward(out.c(), a.c(), b.c());
    gpu_->gelu_backward(out.g(), a.g(), b.g());
    expect_match(out, tol(t), "gelu backward");
    Pair gu = randp(t, {N, 2 * C}, 4), y = randp(t, {N, C}, 5), dgu = randp(t, {N, 2 * C}, 6);
    for (GatedAct act : {GatedAct::silu, GatedAct::gelu_tanh}) {  // SwiGLU and GeGLU
      cpu_.swiglu_forward(y.c(), gu.c(), act);
      gpu_->swiglu_forward(y.g(), gu.g(), act);
      expect_match(y, tol(t), "swiglu");
      cpu_.swiglu_backward(dgu.c(), gu.c(), b.c(), act);
      gpu_->swiglu_backward(dgu.g(), gu.g(), b.g(), act);
      expect_match(dgu, tol(t), "swiglu backward");
    }
  }
}

TEST_F(CudaParity, Norms) {
  for (DType t : kActs) {
    const int64_t N = 300, C = 200;  // rows past one slice, columns past one strip
    Pair x = randp(t, {N, C}, 1, 2.0f), w = randp(t, {C}, 2), bias = randp(t, {C}, 3), y = randp(t, {N, C}, 4);
    Pair mean = randp(DType::f32, {N}, 5), rstd = randp(DType::f32, {N}, 6), dy = randp(t, {N, C}, 7);
    Pair dx = randp(t, {N, C}, 8), dw = randp(DType::f32, {C}, 9), db = randp(DType::f32, {C}, 10);
    cpu_.layernorm_forward(y.c(), mean.c(), rstd.c(), x.c(), w.c(), bias.c());
    gpu_->layernorm_forward(y.g(), mean.g(), rstd.g(), x.g(), w.g(), bias.g());
    expect_match(y, tol(t), "layernorm"), expect_match(rstd, 1e-5, "layernorm rstd");
    cpu_.layernorm_backward(dx.c(), dw.c(), db.c(), dy.c(), x.c(), w.c(), mean.c(), rstd.c());
    gpu_->layernorm_backward(dx.g(), dw.g(), db.g(), dy.g(), x.g(), w.g(), mean.g(), rstd.g());
    expect_match(dx, tol(t), "layernorm dx"), expect_match(dw, 1e-5, "dweight"), expect_match(db, 1e-5, "dbias");
    for (const float wofs : {0.0f, 1.0f}) {  // the weight, and Gemma's 1 + w
      cpu_.rmsnorm_forward(y.c(), rstd.c(), x.c(), w.c(), 1e-6f, wofs);
      gpu_->rmsnorm_forward(y.g(), rstd.g(), x.g(), w.g(), 1e-6f, wofs);
      expect_match(y, tol(t), "rmsnorm");
      cpu_.rmsnorm_backward(dx.c(), dw.c(), dy.c(), x.c(), w.c(), rstd.c(), wofs);
      gpu_->rmsnorm_backward(dx.g(), dw.g(), dy.g(), x.g(), w.g(), rstd.g(), wofs);
      expect_match(dx, tol(t), "rmsnorm dx"), expect_match(dw, 1e-5, "rmsnorm dweight");
    }
  }
}

TEST_F(CudaParity, MatmulForwardAndBackward) {
  for (DType t : kActs) {
    const int64_t N = 130, C = 96, OC = 160;
    Pair x = randp(t, {N, C}, 1), w = randp(t, {OC, C}, 2, 0.1f), b = randp(t, {OC}, 3), y = randp(t, {N, OC}, 4);
    cpu_.matmul_forward(y.c(), x.c(), w.c(), b.c());
    gpu_->matmul_forward(y.g(), x.g(), w.g(), b.g());
    expect_match(y, tol(t), "matmul");
    Pair logits = randp(DType::f32, {N, OC}, 5);  // f32 out from low-precision operands
    cpu_.matmul_forward(logits.c(), x.c(), w.c(), {});
    gpu_->matmul_forward(logits.g(), x.g(), w.g(), {});
    expect_match(logits, tol(t), "matmul to f32");
    Pair pre = randp(t, {N, OC}, 10), act = randp(t, {N, OC}, 11);  // GPT-2's MLP: the GELU epilogue
    cpu_.matmul_gelu_forward(act.c(), pre.c(), x.c(), w.c(), b.c());
    gpu_->matmul_gelu_forward(act.g(), pre.g(), x.g(), w.g(), b.g());
    expect_match(pre, tol(t), "matmul+gelu pre-activation"), expect_match(act, tol(t), "matmul+gelu");
    Pair dy = randp(t, {N, OC}, 6), dx = randp(t, {N, C}, 7), dw = randp(DType::f32, {OC, C}, 8),
         db = randp(DType::f32, {OC}, 9);
    cpu_.matmul_backward(dx.c(), dw.c(), db.c(), dy.c(), x.c(), w.c());
    gpu_->matmul_backward(dx.g(), dw.g(), db.g(), dy.g(), x.g(), w.g());
    expect_match(dx, tol(t), "matmul dx"), expect_match(dw, 1e-5, "matmul dweight"), expect_match(db, 1e-5, "dbias");
    cpu_.matmul_backward(dx.c(), {}, {}, dy.c(), x.c(), w.c());  // a frozen weight: dinp alone
    gpu_->matmul_backward(dx.g(), {}, {}, dy.g(), x.g(), w.g());
    expect_match(dx, tol(t), "frozen matmul dx");
  }
}

// A low-rank adapter's column blocks of a fused projection, bit for bit (one fma, one rounding).
TEST_F(CudaParity, ColumnBlocks) {
  for (DType t : kActs) {
    Pair y = randp(t, {37, 96}, 1), x = randp(t, {37, 20}, 2);
    cpu_.add_columns(y.c(), x.c(), 40, 0.3f);
    gpu_->add_columns(y.g(), x.g(), 40, 0.3f);
    expect_match(y, 0, "add_columns");
    cpu_.take_columns(x.c(), y.c(), 70, 1.5f);
    gpu_->take_columns(x.g(), y.g(), 70, 1.5f);
    expect_match(x, 0, "take_columns");
  }
}

TEST_F(CudaParity, AttentionForwardAndBackward) {
  const DropoutSpec drop = make_dropout(0.2f, 11, 3, /*first_row=*/40);
  for (DType t : kActs)
    for (int64_t T : {int64_t(1), int64_t(77), int64_t(256)})
      for (const DropoutSpec& d : {DropoutSpec{}, drop})  // without and with attention dropout
        for (const AttentionSpec& spec : {AttentionSpec{}, AttentionSpec{40, 0.1f, 3.0f}}) {  // and Gemma's
          const int64_t B = 2, NH = 3, hd = 64, C = NH * hd;
          Pair qkv = randp(t, {B, T, 3 * C}, 1), out = randp(t, {B, T, C}, 2), lse = randp(DType::f32, {B, NH, T}, 3);
          cpu_.attention_forward(out.c(), lse.c(), qkv.c(), int(NH), d, spec);
          gpu_->attention_forward(out.g(), lse.g(), qkv.g(), int(NH), d, spec);
          expect_match(out, tol(t), "attention"), expect_match(lse, 1e-5, "lse");
          Pair dout = randp(t, {B, T, C}, 4), dqkv = randp(t, {B, T, 3 * C}, 5);
          cpu_.attention_backward(dqkv.c(), dout.c(), qkv.c(), out.c(), lse.c(), int(NH), d, spec);
          gpu_->attention_backward(dqkv.g(), dout.g(), qkv.g(), out.g(), lse.g(), int(NH), d, spec);
          expect_match(dqkv, t == DType::f32 ? 1e-4 : 2e-2, "attention backward");
        }
}

// Packed rows: records of 1, 40, 77 and 30 tokens in rows of 256 (the rest padding), each
// attending to itself only; RoPE and the position embedding at each record's positions.
std::vector<int32_t> packed_positions(int64_t B, int64_t T) {
  std::vector<int32_t> pos;
  const int lengths[] = {1, 40, 77, 30};
  for (int64_t b = 0; b < B; ++b) {
    for (int n : lengths)
      for (int p = 0; p < n && int64_t(pos.size()) < (b + 1) * T; ++p) pos.push_back(p);
    for (int p = 0; int64_t(pos.size()) < (b + 1) * T; ++p) pos.push_back(p);
  }
  return pos;
}

TEST_F(CudaParity, PackedRows) {
  const DropoutSpec drop = make_dropout(0.2f, 11, 3, /*first_row=*/40);
  for (DType t : kActs)
    for (const DropoutSpec& d : {DropoutSpec{}, drop})
      for (const AttentionSpec& spec : {AttentionSpec{}, AttentionSpec{40, 0.1f, 3.0f}}) {
        const int64_t B = 2, T = 256, NH = 3, hd = 64, C = NH * hd;
        const std::vector<int32_t> pos = packed_positions(B, T);
        Pair qkv = randp(t, {B, T, 3 * C}, 1), out = randp(t, {B, T, C}, 2), lse = randp(DType::f32, {B, NH, T}, 3);
        cpu_.attention_forward(out.c(), lse.c(), qkv.c(), int(NH), d, spec, pos);
        gpu_->attention_forward(out.g(), lse.g(), qkv.g(), int(NH), d, spec, pos);
        expect_match(out, tol(t), "packed attention"), expect_match(lse, 1e-5, "packed lse");
        Pair dout = randp(t, {B, T, C}, 4), dqkv = randp(t, {B, T, 3 * C}, 5);
        cpu_.attention_backward(dqkv.c(), dout.c(), qkv.c(), out.c(), lse.c(), int(NH), d, spec, pos);
        gpu_->attention_backward(dqkv.g(), dout.g(), qkv.g(), out.g(), lse.g(), int(NH), d, spec, pos);
        expect_match(dqkv, t == DType::f32 ? 1e-4 : 2e-2, "packed attention backward");
      }
  for (DType t : kActs) {
    const int64_t B = 2, T = 256, W = 64, V = 50;
    const std::vector<int32_t> pos = packed_positions(B, T);
    Pair x = randp(t, {B, T, W}, 6);
    for (bool inverse : {false, true}) {
      cpu_.rope(x.c(), 0, 4, 16, RopeSpec{}, inverse, pos);
      gpu_->rope(x.g(), 0, 4, 16, RopeSpec{}, inverse, pos);
      expect_match(x, tol(t), "packed rope");
    }
    std::vector<int32_t> tokens(pos.size());
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7) % V);
    Pair wte = randp(t, {V, W}, 7), wpe = randp(t, {T, W}, 8), out = randp(t, {B, T, W}, 9);
    cpu_.encoder_forward(out.c(), tokens, wte.c(), wpe.c(), pos);
    gpu_->encoder_forward(out.g(), tokens, wte.g(), wpe.g(), pos);
    expect_match(out, tol(t), "packed encoder");
    Pair dwte = randp(DType::f32, {V, W}, 10), dwpe = randp(DType::f32, {T, W}, 11);
    cpu_.encoder_backward(dwte.c(), dwpe.c(), out.c(), tokens, pos);
    gpu_->encoder_backward(dwte.g(), dwpe.g(), out.g(), tokens, pos);
    expect_match(dwte, 1e-6, "packed dwte"), expect_match(dwpe, 1e-6, "packed dwpe");
  }
}

// The same element gets the same mask on both devices (bit for bit: a factor of 0 or 1/(1-p)).
TEST_F(CudaParity, Dropout) {
  for (DType t : kActs) {
    Pair x = randp(t, {3, 17, 40}, 1);
    const DropoutSpec d = make_dropout(0.3f, 5, 2, /*first_row=*/9);
    cpu_.dropout(x.c(), d);
    gpu_->dropout(x.g(), d);
    expect_match(x, 0, "dropout");
  }
}

TEST_F(CudaParity, LlamaOps) {
  for (DType t : kActs) {
    const int64_t B = 2, T = 33;
    const int NH = 4, NKV = 2, hd = 16, Wf = (NH + 2 * NKV) * hd;
    Pair fused = randp(t, {B, T, Wf}, 1), packed = randp(t, {B, T, 3 * NH * hd}, 2);
    for (bool inverse : {false, true}) {
      RopeSpec llama3;
      llama3.scaling = RopeScaling::llama3, llama3.factor = 8.0f, llama3.original_max_position = 64;
      RopeSpec partial;  // Phi-3's partial_rotary_factor: 10 of 16 dims rotate
      partial.rotary_dim = 10;
      for (const RopeSpec& rope : {RopeSpec{}, llama3, partial}) {
        cpu_.rope(fused.c(), 0, NH + NKV, hd, rope, inverse);
        gpu_->rope(fused.g(), 0, NH + NKV, hd, rope, inverse);
        expect_match(fused, tol(t), "rope");
      }
    }
    // The q/k norm per head (Qwen3; Gemma-3's with 1 + w) and whole (OLMo-2): forward out of
    // place, backward in place on dfused.
    for (const QkNormSpec& spec : {QkNormSpec{}, QkNormSpec{false, 1.0f}, QkNormSpec{true, 0.0f}}) {
      const kernel_math::QkNormGroups q = kernel_math::qk_norm_groups(NH, NKV, hd, spec);
      Pair raw = randp(t, {B, T, Wf}, 7), qkw = randp(t, {q.weights()}, 8), out = randp(t, {B, T, Wf}, 9);
      Pair rstd = randp(DType::f32, {B, T, q.count()}, 10), dfused = randp(t, {B, T, Wf}, 11);
      Pair dw = randp(DType::f32, {q.weights()}, 12);
      cpu_.qk_rmsnorm_forward(out.c(), rstd.c(), raw.c(), qkw.c(), NH, NKV, hd, 1e-6f, spec);
      gpu_->qk_rmsnorm_forward(out.g(), rstd.g(), raw.g(), qkw.g(), NH, NKV, hd, 1e-6f, spec);
      expect_match(out, tol(t), "qk_rmsnorm forward");
      expect_match(rstd, 1e-5, "qk_rmsnorm rstd");
      cpu_.qk_rmsnorm_backward(dfused.c(), dw.c(), raw.c(), qkw.c(), rstd.c(), NH, NKV, hd, spec);
      gpu_->qk_rmsnorm_backward(dfused.g(), dw.g(), raw.g(), qkw.g(), rstd.g(), NH, NKV, hd, spec);
      expect_match(dfused, tol(t), "qk_rmsnorm backward");
      expect_match(dw, 1e-3, "qk_rmsnorm dweight");
    }
    cpu_.gqa_expand(packed.c(), fused.c(), NH, NKV, hd);
    gpu_->gqa_expand(packed.g(), fused.g(), NH, NKV, hd);
    expect_match(packed, 0, "gqa expand");
    cpu_.gqa_reduce(fused.c(), packed.c(), NH, NKV, hd);
    gpu_->gqa_reduce(fused.g(), packed.g(), NH, NKV, hd);
    expect_match(fused, tol(t), "gqa reduce");
  }
}

TEST_F(CudaParity, EmbeddingAndCrossEntropy) {
  for (DType t : kActs) {
    const int64_t B = 2, T = 16, C = 64, V = 101, Vp = 128;
    std::vector<int32_t> tokens(size_t(B * T)), targets(size_t(B * T));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37) % V), targets[i] = int32_t((i * 11) % V);
    targets[3] = -1;  // masked
    Pair wte = randp(t, {V, C}, 1), wpe = randp(t, {T, C}, 2), out = randp(t, {B, T, C}, 3);
    cpu_.encoder_forward(out.c(), tokens, wte.c(), wpe.c());
    gpu_->encoder_forward(out.g(), tokens, wte.g(), wpe.g());
    expect_match(out, tol(t), "encoder");
    Pair dwte = randp(DType::f32, {V, C}, 4), dwpe = randp(DType::f32, {T, C}, 5);
    cpu_.encoder_backward(dwte.c(), dwpe.c(), out.c(), tokens);
    gpu_->encoder_backward(dwte.g(), dwpe.g(), out.g(), tokens);
    expect_match(dwte, 1e-6, "dwte"), expect_match(dwpe, 1e-6, "dwpe");
    Pair logits = randp(DType::f32, {B * T, Vp}, 6, 3.0f), losses = randp(DType::f32, {B * T}, 7);
    Pair sum = make({0.0f, 0.0f}, DType::f32, {2});  // a device f64 scalar (8 zero bytes)
    cpu_.cross_entropy_forward_backward(losses.c(), logits.c(), targets, int(V), 0.5f, sum.cpu.as<double>(), 3.0, 2.0);
    gpu_->cross_entropy_forward_backward(losses.g(), logits.g(), targets, int(V), 0.5f, sum.gpu.as<double>(), 3.0, 2.0);
    expect_match(losses, 1e-6, "losses"), expect_match(logits, 1e-6, "dlogits");
    double a = 0, b = 0;
    std::memcpy(&a, sum.cpu.data(), 8);
    gpu_->download(&b, sum.gpu.data(), 8);
    EXPECT_NEAR(a, b, 1e-6 * std::fabs(a));
    // Gemma-2's soft-capped logits.
    Pair capped = randp(DType::f32, {B * T, Vp}, 8, 3.0f);
    cpu_.cross_entropy_forward_backward(losses.c(), capped.c(), targets, int(V), 0.5f, nullptr, 1.0, 1.0, 2.5f);
    gpu_->cross_entropy_forward_backward(losses.g(), capped.g(), targets, int(V), 0.5f, nullptr, 1.0, 1.0, 2.5f);
    expect_match(losses, 1e-5, "capped losses"), expect_match(capped, 1e-6, "capped dlogits");
  }
}

TEST_F(CudaParity, EngineOpsSquareSumAndAdamW) {
  const int64_t n = 1'000'003;
  Pair g = randp(DType::f32, {n}, 1);
  Pair sq = make({0, 0}, DType::f32, {2});
  cpu_.sum_squares(sq.cpu.as<double>(), g.cpu.data(), DType::f32, n, false, cpu_.compute_stream());
  gpu_->sum_squares(sq.gpu.as<double>(), g.gpu.data(), DType::f32, n, false, gpu_->compute_stream());
  double a = 0, b = 0;
  std::memcpy(&a, sq.cpu.data(), 8);
  gpu_->download(&b, sq.gpu.data(), 8);
  EXPECT_NEAR(a, b, 1e-12 * a);
  auto vv = randn(size_t(n), 4, 0.01f);
  for (auto& x : vv) x = std::fabs(x);
  Pair p = randp(DType::f32, {n}, 2), m = randp(DType::f32, {n}, 3, 0.1f), v = make(vv, DType::f32, {n});
  Pair out = randp(DType::bf16, {n}, 5), bad = make({0}, DType::f32, {1});
  for (bool on_gpu : {false, true}) {
    Backend& be = on_gpu ? static_cast<Backend&>(*gpu_) : cpu_;
    auto ptr = [&](const Pair& x) { return on_gpu ? x.gpu.data() : x.cpu.data(); };
    AdamWArgs args;
    args.param = static_cast<float*>(ptr(p)), args.m = static_cast<float*>(ptr(m)),
    args.v = static_cast<float*>(ptr(v));
    args.grad = ptr(g), args.param_out = ptr(out), args.out_dtype = DType::bf16, args.n = n;
    args.lr = 1e-3f, args.beta2 = 0.95f, args.weight_decay = 0.1f, args.grad_scale = 0.5f, args.t = 3;
    args.isa = 1;  // the CPU's scalar kernel: the CUDA kernel's arithmetic
    be.adamw(args, static_cast<int32_t*>(ptr(bad)), be.compute_stream());
  }
  gpu_->compute_stream().synchronize();
  expect_match(p, 0, "adamw param"), expect_match(m, 0, "adamw m"), expect_match(v, 0, "adamw v");
  expect_match(out, 0, "adamw bf16 out");
}

// 16-bit states — bf16 m and v, a bf16 master (the compute copy itself), or all three —
// rounded stochastically from the model-flat index or to nearest: the device's states and
// copy-out are the CPU scalar kernel's bit for bit.
TEST_F(CudaParity, AdamWOnBf16StatesIsTheCpuKernel) {
  const int64_t n = 1'000'003;
  struct Layout {
    bool master16, moments16;
  };
  for (const Layout l : {Layout{false, true}, Layout{true, true}, Layout{true, false}})
    for (bool stochastic : {true, false}) {
      Pair g = randp(DType::f32, {n}, 1);
      Pair p = randp(l.master16 ? DType::bf16 : DType::f32, {n}, 2);
      const DType mt = l.moments16 ? DType::bf16 : DType::f32;
      Pair m = randp(mt, {n}, 3, 0.1f), v = randp(mt, {n}, 4, 0.01f);
      {  // v >= 0, as the update keeps it
        std::vector<char> h(size_t(n) * dtype_size(mt));
        std::memcpy(h.data(), v.cpu.data(), h.size());
        for (int64_t i = 0; i < n; ++i) {
          char* sign = h.data() + size_t(i + 1) * dtype_size(mt) - 1;  // little-endian: the top byte
          *sign = char(*sign & 0x7f);
        }
        std::memcpy(v.cpu.data(), h.data(), h.size());
        gpu_->upload(v.gpu.data(), h.data(), h.size());
      }
      Pair out = randp(DType::bf16, {n}, 5), bad = make({0}, DType::f32, {1});
      for (bool on_gpu : {false, true}) {
        Backend& be = on_gpu ? static_cast<Backend&>(*gpu_) : cpu_;
        auto ptr = [&](const Pair& x) { return on_gpu ? x.gpu.data() : x.cpu.data(); };
        AdamWArgs args;
        if (l.master16)
          args.param16 = static_cast<uint16_t*>(ptr(p));
        else
          args.param = static_cast<float*>(ptr(p)), args.param_out = ptr(out), args.out_dtype = DType::bf16;
        if (l.moments16)
          args.m16 = static_cast<uint16_t*>(ptr(m)), args.v16 = static_cast<uint16_t*>(ptr(v));
        else
          args.m = static_cast<float*>(ptr(m)), args.v = static_cast<float*>(ptr(v));
        args.stochastic = stochastic, args.seed = 1234, args.index_base = (int64_t(1) << 32) - 77;  // crosses 2^32
        args.grad = ptr(g), args.n = n, args.lr = 1e-3f, args.weight_decay = 0.1f, args.t = 5;
        args.isa = 1;  // the CPU's scalar kernel
        be.adamw(args, static_cast<int32_t*>(ptr(bad)), be.compute_stream());
      }
      gpu_->compute_stream().synchronize();
      const std::string what = std::string(l.master16 ? "bf16 master" : "f32 master") +
                               (l.moments16 ? ", bf16 m, v" : ", f32 m, v") +
                               (stochastic ? ", stochastic" : ", nearest");
      for (const auto& [x, name] :
           {std::pair<const Pair*, const char*>{&p, "param"}, {&m, "m"}, {&v, "v"}, {&out, "copy-out"}})
        expect_match(*x, 0, ("adamw16 " + std::string(name) + ", " + what).c_str());
    }
}

// Memory: one carve-up of one allocation; the budget sees every buffer, and a buffer larger
// than the GPU has is a clear error, not a crash.
TEST_F(CudaParity, AllocatorChargesTheBudgetAndFailsClearly) {
  const size_t before = gpu_->budget().used();
  {
    Buffer b = gpu_->allocate(size_t(100) << 20, "test:100MiB");
    EXPECT_EQ(gpu_->budget().used(), before + (size_t(100) << 20));
  }
  EXPECT_EQ(gpu_->budget().used(), before);
  EXPECT_THROW(gpu_->allocate(size_t(1) << 50, "test:too-large"), Error);
  void* pinned = gpu_->host_allocate(1 << 20, true, "test:pinned");
  gpu_->host_free(pinned, 1 << 20, true);
}

// Streams: work on one stream after an event recorded on another runs after it; host work
// runs in order and its errors surface at synchronize.
TEST_F(CudaParity, StreamsEventsAndHostWork) {
  auto s1 = gpu_->make_stream("a"), s2 = gpu_->make_stream("b");
  auto e = gpu_->make_event();
  Buffer d = gpu_->allocate(1 << 24, "test:copy");
  std::vector<uint8_t> src(1 << 24, 7), dst(1 << 24, 0);
  void* pin = gpu_->host_allocate(1 << 24, true, "test:pin");
  std::memcpy(pin, src.data(), src.size());
  gpu_->copy_async(d.data(), pin, src.size(), *s1);
  s1->record(*e);
  s2->wait(*e);
  gpu_->copy_async(dst.data(), d.data(), dst.size(), *s2);
  int order = 0;
  s2->launch_host([&] { order = order * 10 + 1; });
  s2->launch_host([&] { order = order * 10 + 2; });
  s2->synchronize();
  EXPECT_EQ(order, 12);
  EXPECT_EQ(dst, src);
  s2->launch_host([] { throw_error("planted", "test"); });
  EXPECT_THROW(s2->synchronize(), Error);
  gpu_->host_free(pin, 1 << 24, true);
}

}  // namespace
}  // namespace strata
