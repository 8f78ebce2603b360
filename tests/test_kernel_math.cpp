// The CUDA kernels' element math (kernels/math/), built for the host, against the CPU
// backend's ops: CI has no GPU, so this is where a wrong formula is caught. Each driver
// below does on the host what the kernel does per thread (same functions, same order of
// the per-row reductions where the order matters), and the launch-shape helpers are held
// to the splits the kernels assume.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "host/adam/adam.h"
#include "host/engine_ops.h"
#include "kernels/math/adam16_math.h"
#include "kernels/math/element_math.h"
#include "kernels/math/launch_shape.h"
#include "test_util.h"

namespace strata {
namespace {

namespace km = kernel_math;

using test::randn;

TensorView f32(std::vector<float>& v, Shape s) { return {v.data(), DType::f32, s}; }

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, float rel, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], rel * (1.0f + std::fabs(ref[i]))) << what << " element " << i;
}

struct Fixture : ::testing::Test {
  cpu::CpuBackend be{{size_t(64) << 20, 1, /*opaque=*/false}};
  cpu::Workspace ws{[this](size_t n, const std::string& tag) { return be.allocate(n, tag); }};
};
using KernelMath = Fixture;

TEST_F(KernelMath, GeluAndItsGradient) {
  const int64_t n = 4099;
  auto x = randn(size_t(n), 1, 3.0f), dy = randn(size_t(n), 2);
  std::vector<float> ref(static_cast<size_t>(n)), got(static_cast<size_t>(n)), dref = dy, dgot(static_cast<size_t>(n));
  cpu::gelu_forward(f32(ref, {n}), f32(x, {n}));
  cpu::gelu_backward(f32(dref, {n}), f32(x, {n}), f32(dref, {n}));
  for (int64_t i = 0; i < n; ++i) got[size_t(i)] = km::gelu(x[size_t(i)]);
  for (int64_t i = 0; i < n; ++i) dgot[size_t(i)] = km::gelu_grad(x[size_t(i)]) * dy[size_t(i)];
  // The CPU's tanh is a vector approximation (about 1e-6): 1 - th² amplifies it where th → ±1.
  expect_close(got, ref, 1e-5f, "gelu");
  expect_close(dgot, dref, 1e-5f, "gelu'");
}

TEST_F(KernelMath, SwiGluAndItsGradient) {
  const int64_t N = 7, I = 33;
  auto gu = randn(size_t(N * 2 * I), 3, 2.0f), dy = randn(size_t(N * I), 4);
  std::vector<float> ref(static_cast<size_t>(N * I)), dref(static_cast<size_t>(N * 2 * I)),
      got(static_cast<size_t>(N * I)), dgot(static_cast<size_t>(N * 2 * I));
  cpu::swiglu_forward(f32(ref, {N, I}), f32(gu, {N, 2 * I}));
  cpu::swiglu_backward(f32(dref, {N, 2 * I}), f32(gu, {N, 2 * I}), f32(dy, {N, I}));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < I; ++i) {
      const float g = gu[size_t(n * 2 * I + i)], u = gu[size_t(n * 2 * I + I + i)];
      got[size_t(n * I + i)] = km::swiglu(g, u);
      km::swiglu_grad(g, u, dy[size_t(n * I + i)], &dgot[size_t(n * 2 * I + i)], &dgot[size_t(n * 2 * I + I + i)]);
    }
  expect_close(got, ref, 1e-6f, "swiglu");
  expect_close(dgot, dref, 1e-6f, "swiglu'");
}

// GeGLU (Gemma's MLP): the CPU op's vector tanh against the kernels' scalar math, and the
// gradient against central differences of the forward.
TEST_F(KernelMath, GeGluAndItsGradient) {
  const int64_t N = 7, I = 33;
  auto gu = randn(size_t(N * 2 * I), 13, 2.0f), dy = randn(size_t(N * I), 14);
  std::vector<float> ref(static_cast<size_t>(N * I)), dref(static_cast<size_t>(N * 2 * I)),
      got(static_cast<size_t>(N * I)), dgot(static_cast<size_t>(N * 2 * I)), fd(static_cast<size_t>(N * 2 * I));
  cpu::swiglu_forward(f32(ref, {N, I}), f32(gu, {N, 2 * I}), GatedAct::gelu_tanh);
  cpu::swiglu_backward(f32(dref, {N, 2 * I}), f32(gu, {N, 2 * I}), f32(dy, {N, I}), GatedAct::gelu_tanh);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < I; ++i) {
      const double g = gu[size_t(n * 2 * I + i)], u = gu[size_t(n * 2 * I + I + i)], h = 1e-3;
      got[size_t(n * I + i)] = km::geglu(float(g), float(u));
      km::geglu_grad(float(g), float(u), dy[size_t(n * I + i)], &dgot[size_t(n * 2 * I + i)],
                     &dgot[size_t(n * 2 * I + I + i)]);
      auto gelu = [](double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); };
      fd[size_t(n * 2 * I + i)] = float(dy[size_t(n * I + i)] * u * (gelu(g + h) - gelu(g - h)) / (2 * h));
      fd[size_t(n * 2 * I + I + i)] = float(dy[size_t(n * I + i)] * gelu(g));
    }
  expect_close(got, ref, 1e-5f, "geglu");
  expect_close(dgot, dref, 1e-5f, "geglu'");
  expect_close(dgot, fd, 1e-4f, "geglu' against differences");
}

TEST_F(KernelMath, LayerNormForwardAndBackward) {
  const int64_t N = 9, C = 70;
  auto x = randn(size_t(N * C), 5, 2.0f), w = randn(size_t(C), 6), b = randn(size_t(C), 7),
       dy = randn(size_t(N * C), 8);
  std::vector<float> y(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N)),
      dx = randn(static_cast<size_t>(N * C), 9);
  std::vector<float> dw(static_cast<size_t>(C), 0.5f), db(static_cast<size_t>(C), -0.5f);
  std::vector<float> gy(y.size()), gdx = dx, gdw = dw, gdb = db;
  cpu::layernorm_forward(f32(y, {N, C}), f32(mean, {N}), f32(rstd, {N}), f32(x, {N, C}), f32(w, {C}), f32(b, {C}));
  cpu::layernorm_backward(f32(dx, {N, C}), f32(dw, {C}), f32(db, {C}), f32(dy, {N, C}), f32(x, {N, C}), f32(w, {C}),
                          f32(mean, {N}), f32(rstd, {N}), ws);
  for (int64_t n = 0; n < N; ++n) {  // norms.cu: a warp's row sums, then the element math
    const float* xr = &x[size_t(n * C)];
    float s = 0, v = 0, a = 0, bb = 0;
    for (int64_t c = 0; c < C; ++c) s += xr[c];
    const float m = s / float(C);
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    const float r = km::norm_rstd(v, int(C), km::kLayerNormEps);
    EXPECT_NEAR(m, mean[size_t(n)], 1e-5f);
    EXPECT_NEAR(r, rstd[size_t(n)], 1e-5f * r);
    for (int64_t c = 0; c < C; ++c) {
      gy[size_t(n * C + c)] = km::layernorm_out(xr[c], m, r, w[size_t(c)], b[size_t(c)]);
      const float dnorm = w[size_t(c)] * dy[size_t(n * C + c)];
      a += dnorm, bb += dnorm * (xr[c] - m) * r;
    }
    for (int64_t c = 0; c < C; ++c) {
      const float g = dy[size_t(n * C + c)];
      gdx[size_t(n * C + c)] += km::layernorm_dx(xr[c], m, r, w[size_t(c)], g, a / float(C), bb / float(C));
      gdw[size_t(c)] += (xr[c] - m) * r * g, gdb[size_t(c)] += g;
    }
  }
  expect_close(gy, y, 1e-5f, "layernorm y");
  expect_close(gdx, dx, 1e-5f, "layernorm dx");
  expect_close(gdw, dw, 1e-5f, "layernorm dweight");
  expect_close(gdb, db, 1e-5f, "layernorm dbias");
}

TEST_F(KernelMath, RmsNormForwardAndBackward) {
  const int64_t N = 6, C = 48;
  const float eps = 1e-6f;
  auto x = randn(size_t(N * C), 10), w = randn(size_t(C), 11), dy = randn(size_t(N * C), 12);
  std::vector<float> y(static_cast<size_t>(N * C)), rstd(static_cast<size_t>(N)), dx(static_cast<size_t>(N * C), 0.25f),
      dw(static_cast<size_t>(C), 0.0f);
  std::vector<float> gy(y.size()), gdx = dx, gdw = dw;
  cpu::rmsnorm_forward(f32(y, {N, C}), f32(rstd, {N}), f32(x, {N, C}), f32(w, {C}), eps);
  cpu::rmsnorm_backward(f32(dx, {N, C}), f32(dw, {C}), f32(dy, {N, C}), f32(x, {N, C}), f32(w, {C}), f32(rstd, {N}),
                        ws);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = &x[size_t(n * C)];
    float ss = 0, dot = 0;
    for (int64_t c = 0; c < C; ++c) ss += xr[c] * xr[c];
    const float r = km::norm_rstd(ss, int(C), eps);
    for (int64_t c = 0; c < C; ++c) {
      gy[size_t(n * C + c)] = km::rmsnorm_out(xr[c], r, w[size_t(c)]);
      dot += w[size_t(c)] * dy[size_t(n * C + c)] * xr[c] * r;
    }
    dot /= float(C);
    for (int64_t c = 0; c < C; ++c) {
      gdx[size_t(n * C + c)] += km::rmsnorm_dx(xr[c], r, w[size_t(c)], dy[size_t(n * C + c)], dot);
      gdw[size_t(c)] += xr[c] * r * dy[size_t(n * C + c)];
    }
  }
  expect_close(gy, y, 1e-5f, "rmsnorm y");
  expect_close(gdx, dx, 1e-5f, "rmsnorm dx");
  expect_close(gdw, dw, 1e-5f, "rmsnorm dweight");
}

TEST_F(KernelMath, RotaryEmbeddingsAndTheirInverse) {
  const int64_t B = 2, T = 5;
  RopeSpec linear, llama3;
  linear.scaling = RopeScaling::linear, linear.factor = 4.0f;
  llama3.scaling = RopeScaling::llama3, llama3.theta = 500000.0f, llama3.factor = 8.0f;
  llama3.original_max_position = 16;  // a tiny context, so the 4 pairs fall in all three bands
  // hd 8: the CPU op's scalar pairs alone; 20: one vector of 8 pairs and 2 more; 64: vectors.
  for (const int hd : {8, 20, 64})
    for (const RopeSpec& rope : {RopeSpec{}, linear, llama3})
      for (bool inverse : {false, true}) {
        const int heads = 3, first = 1, W = 5 * hd;
        auto ref = randn(size_t(B * T * W), 13), got = ref;
        cpu::rope(f32(ref, {B, T, W}), first, heads, hd, rope, inverse);
        for (int64_t n = 0; n < B * T; ++n)  // llama.cu: the table's cos/sin, then the rotation
          for (int h = first; h < first + heads; ++h)
            for (int i = 0; i < hd / 2; ++i) {
              const float a = km::rope_angle(int(n % T), i, hd, rope);
              float* v = &got[size_t(n * W + h * hd)];
              km::rope_rotate(&v[i], &v[i + hd / 2], std::cos(a), (inverse ? -1.0f : 1.0f) * std::sin(a));
            }
        expect_close(got, ref, 1e-6f, inverse ? "rope inverse" : "rope");
      }
}

// transformers' _compute_llama3_parameters, written out in double for one case: the
// frequencies above the band kept, those below divided by the factor, the band blended.
TEST_F(KernelMath, Llama3RopeScalingBands) {
  RopeSpec r;
  r.scaling = RopeScaling::llama3, r.theta = 500000.0f, r.factor = 8.0f, r.low_freq_factor = 1.0f,
  r.high_freq_factor = 4.0f, r.original_max_position = 8192;
  const int hd = 128;
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < hd / 2; ++i) {
    const double inv = 1.0 / std::pow(500000.0, 2.0 * i / hd), wavelen = 2 * M_PI / inv;
    double want = inv;
    if (wavelen > 8192.0)
      want = inv / 8, ++divided;
    else if (wavelen >= 2048.0) {
      const double s = (8192.0 / wavelen - 1) / 3;
      want = (1 - s) * inv / 8 + s * inv, ++blended;
    } else {
      ++kept;
    }
    EXPECT_NEAR(km::rope_inv_freq(i, hd, r), want, 2e-6 * want) << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
}

// Dropout masks are a function of (seed, site, sample, position, column) alone: a batch's row
// gets the mask of its global sample number wherever that row sits, the drop rate is p, and
// the kept elements carry 1/(1-p).
TEST_F(KernelMath, DropoutMasksFollowTheSampleNotTheRow) {
  const int64_t T = 6, W = 40;
  const DropoutSpec four = make_dropout(0.1f, 1337, 9, /*first_row=*/4), two = make_dropout(0.1f, 1337, 9, 5);
  std::vector<float> a(size_t(4 * T * W), 1.0f), b(size_t(2 * T * W), 1.0f);
  cpu::dropout(f32(a, {4, T, W}), four);  // samples 4..7
  cpu::dropout(f32(b, {2, T, W}), two);   // samples 5..6, as another rank would hold them
  for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], a[size_t(T * W) + i]) << i;
  int64_t dropped = 0;
  for (float x : a) {
    ASSERT_TRUE(x == 0.0f || x == four.scale) << x;
    dropped += x == 0.0f;
  }
  // 960 draws at p = 0.1: 96 ± 9.3 (one sigma); 5 sigma either side.
  EXPECT_NEAR(double(dropped), 96.0, 47.0);
  // A large sample: the rate within 0.3% of p, and another site or seed draws other masks.
  int64_t n = 1 << 20, drops = 0, same_site = 0, same_seed = 0;
  const DropoutSpec other_site = make_dropout(0.1f, 1337, 10, 4), other_seed = make_dropout(0.1f, 1338, 9, 4);
  for (int64_t i = 0; i < n; ++i) {
    const bool d = km::dropout_mult(four, uint64_t(i)) == 0.0f;
    drops += d;
    same_site += d == (km::dropout_mult(other_site, uint64_t(i)) == 0.0f);
    same_seed += d == (km::dropout_mult(other_seed, uint64_t(i)) == 0.0f);
  }
  EXPECT_NEAR(double(drops) / double(n), 0.1, 0.003);
  EXPECT_NEAR(double(same_site) / double(n), 0.82, 0.01);  // independent masks agree 0.9² + 0.1²
  EXPECT_NEAR(double(same_seed) / double(n), 0.82, 0.01);
  std::vector<float> c(size_t(T * W), 3.0f);
  cpu::dropout(f32(c, {1, T, W}), DropoutSpec{});  // p = 0: the identity
  for (float x : c) ASSERT_EQ(x, 3.0f);
}

TEST_F(KernelMath, CrossEntropyLossAndGradient) {
  const int64_t N = 5, Vp = 40;
  const int vocab = 37;
  const float dloss = 0.25f;
  auto logits = randn(size_t(N * Vp), 14, 4.0f), got = logits;
  std::vector<int32_t> targets = {3, -1, 36, 0, 17};
  std::vector<float> losses(static_cast<size_t>(N)), glosses(static_cast<size_t>(N));
  const double total =
      cpu::cross_entropy_forward_backward(f32(losses, {N}), f32(logits, {N, Vp}), targets, vocab, dloss);
  double gtotal = 0;
  for (int64_t n = 0; n < N; ++n) {  // embed_loss.cu: the row's max and Σ exp, then the element math
    float* row = &got[size_t(n * Vp)];
    const int32_t t = targets[size_t(n)];
    if (t < 0) {
      for (int64_t v = 0; v < Vp; ++v) row[v] = 0;
      continue;
    }
    float mx = -INFINITY;
    for (int v = 0; v < vocab; ++v) mx = std::max(mx, row[v]);
    double s = 0;
    for (int v = 0; v < vocab; ++v) s += double(std::exp(row[v] - mx));
    const float target_logit = row[t];
    glosses[size_t(n)] = float(km::cross_entropy_loss(mx, s, target_logit));
    gtotal += glosses[size_t(n)];
    for (int64_t v = 0; v < Vp; ++v) row[v] = v < vocab ? km::cross_entropy_grad(row[v], mx, s, dloss, v == t) : 0.0f;
  }
  expect_close(glosses, losses, 1e-6f, "losses");
  expect_close(got, logits, 1e-6f, "dlogits");
  EXPECT_NEAR(gtotal, total, 1e-5 * std::fabs(total));
}

// optimizer.cu's AdamW is the CPU scalar kernel's arithmetic: bit for bit.
TEST_F(KernelMath, AdamWMatchesTheCpuKernelBitForBit) {
  const int64_t n = 1000;
  auto p = randn(size_t(n), 15), m = randn(size_t(n), 16, 0.1f), v = randn(size_t(n), 17, 0.01f),
       g = randn(size_t(n), 18);
  for (auto& x : v) x = std::fabs(x);
  g[7] = INFINITY;
  auto rp = p, rm = m, rv = v;
  host::AdamTensors t;
  t.param = rp.data(), t.m = rm.data(), t.v = rv.data(), t.grad = g.data(), t.grad_dtype = DType::f32, t.n = n;
  const host::AdamHyper h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, true, true, 7, 0.5f};
  const bool ref_bad = host::adam_step(t, h, {host::AdamIsa::scalar, 1});
  const km::AdamConsts c = km::adam_consts(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, h.step);
  bool bad = false;
  for (int64_t i = 0; i < n; ++i)
    bad |= !km::adamw_element(&p[size_t(i)], &m[size_t(i)], &v[size_t(i)], g[size_t(i)], c);
  EXPECT_EQ(bad, ref_bad);
  for (int64_t i = 0; i < n; ++i) {
    if (i == 7) continue;  // non-finite: both produce NaN
    ASSERT_EQ(p[size_t(i)], rp[size_t(i)]) << i;
    ASSERT_EQ(m[size_t(i)], rm[size_t(i)]) << i;
    ASSERT_EQ(v[size_t(i)], rv[size_t(i)]) << i;
  }
}

// DeepSpeed's bias_correction false: the same arithmetic without 1-β^t, still bit for bit.
TEST_F(KernelMath, AdamWWithoutBiasCorrectionMatchesTheCpuKernel) {
  const int64_t n = 257;
  auto p = randn(size_t(n), 20), m = randn(size_t(n), 21, 0.1f), g = randn(size_t(n), 22);
  std::vector<float> v(size_t(n), 0.01f);
  auto rp = p, rm = m, rv = v;
  host::AdamTensors t;
  t.param = rp.data(), t.m = rm.data(), t.v = rv.data(), t.grad = g.data(), t.grad_dtype = DType::f32, t.n = n;
  const host::AdamHyper h{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, true, false, 3, 1.0f};
  host::adam_step(t, h, {host::AdamIsa::scalar, 1});
  const km::AdamConsts c = km::adam_consts(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, h.step, false);
  for (int64_t i = 0; i < n; ++i) km::adamw_element(&p[size_t(i)], &m[size_t(i)], &v[size_t(i)], g[size_t(i)], c);
  EXPECT_EQ(p, rp);
  EXPECT_EQ(m, rm);
  EXPECT_EQ(v, rv);
}

// optimizer.cu's AdamW on 16-bit states (kernel_math::adamw16_element: adamw_element
// between adam16_math's widening and rounding, its random bits from the model-flat index) is
// the CPU's 16-bit kernel bit for bit — bf16 m and v, a bf16 master, or all three; stochastic
// or nearest; across a 2^32 index boundary; with a copy-out; on every ISA this CPU has.
TEST_F(KernelMath, AdamWOnBf16StatesMatchesTheCpuKernelBitForBit) {
  const int64_t n = 777;
  auto p0 = randn(size_t(n), 25), g = randn(size_t(n), 26), mf = randn(size_t(n), 27, 0.1f),
       vf = randn(size_t(n), 28, 0.01f);
  std::vector<uint16_t> p16_0(static_cast<size_t>(n)), m16_0(static_cast<size_t>(n)), v16_0(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    vf[size_t(i)] = std::fabs(vf[size_t(i)]);
    p16_0[size_t(i)] = km::bf16_nearest(p0[size_t(i)]);
    m16_0[size_t(i)] = km::bf16_nearest(mf[size_t(i)]), v16_0[size_t(i)] = km::bf16_nearest(vf[size_t(i)]);
  }
  const host::AdamHyper h{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, true, true, 11, 0.5f};
  const uint64_t seed = 99;
  const int64_t base = (int64_t(1) << 32) - 300;
  struct Layout {
    bool master16, moments16;
  };
  for (const Layout l : {Layout{false, true}, Layout{true, true}, Layout{true, false}})
    for (bool stochastic : {true, false}) {
      // The device's loop, on the host.
      auto p = p0, m = mf, v = vf;
      auto p16 = p16_0, m16 = m16_0, v16 = v16_0;
      std::vector<uint16_t> out(static_cast<size_t>(n));
      const km::AdamConsts c = km::adam_consts(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, h.step);
      const km::Adam16Keys keys = km::adam16_keys(seed, h.step);
      for (int64_t i = 0; i < n; ++i) {
        const size_t k = size_t(i);
        float stored;
        km::adamw16_element(l.master16 ? nullptr : &p[k], l.master16 ? &p16[k] : nullptr, l.moments16 ? nullptr : &m[k],
                            l.moments16 ? &m16[k] : nullptr, l.moments16 ? nullptr : &v[k],
                            l.moments16 ? &v16[k] : nullptr, g[k], c, km::adam16_hash(uint64_t(base + i), keys), keys.p,
                            stochastic, &stored);
        out[k] = km::bf16_nearest(stored);  // the kernel's bf16 copy-out
      }
      for (host::AdamIsa isa : {host::AdamIsa::scalar, host::AdamIsa::avx2, host::AdamIsa::avx512}) {
        if (!host::adam_isa_supported(isa)) continue;
        auto rp = p0, rm = mf, rv = vf;
        auto rp16 = p16_0, rm16 = m16_0, rv16 = v16_0;
        std::vector<uint16_t> rout(static_cast<size_t>(n));
        host::AdamTensors t;
        if (l.master16)
          t.param16 = rp16.data();
        else
          t.param = rp.data();
        if (l.moments16)
          t.m16 = rm16.data(), t.v16 = rv16.data();
        else
          t.m = rm.data(), t.v = rv.data();
        t.param_out = rout.data(), t.out_dtype = DType::bf16;
        t.grad = g.data(), t.n = n;
        t.stochastic = stochastic, t.seed = seed, t.index_base = base;
        host::adam_step(t, h, {isa, 2, 64});
        const std::string what = std::string(host::adam_isa_name(isa)) + (stochastic ? ", stochastic" : ", nearest") +
                                 (l.master16 ? ", bf16 master" : ", f32 master") +
                                 (l.moments16 ? ", bf16 m and v" : ", f32 m and v");
        if (l.master16)
          EXPECT_EQ(p16, rp16) << what;
        else
          EXPECT_EQ(p, rp) << what;
        if (l.moments16) {
          EXPECT_EQ(m16, rm16) << what;
          EXPECT_EQ(v16, rv16) << what;
        } else {
          EXPECT_EQ(m, rm) << what;
          EXPECT_EQ(v, rv) << what;
        }
        EXPECT_EQ(out, rout) << what << ": the copy-out";
      }
    }
}

TEST(LaunchShape, GridsCoverTheWorkAndStayLegal) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(255), int64_t(256), int64_t(257), int64_t(1) << 34}) {
    const int g = km::grid_for(n);
    EXPECT_GE(g, 1);
    EXPECT_LE(int64_t(g), km::kMaxGrid);  // grid-stride loops cover what one pass does not
    if (n > 0 && n < km::kMaxGrid * km::kThreads) {
      EXPECT_GE(int64_t(g) * km::kThreads, n);
    }
  }
  EXPECT_EQ(km::grid_for_rows(1), 1);
  EXPECT_EQ(km::grid_for_rows(km::kRowsPerBlock + 1), 2);
  EXPECT_EQ(km::kRowsPerBlock * km::kWarp, km::kThreads);  // one warp per row
}

// The square sum's chunks are the CPU backend's: the same split of any n, at most the
// partial buffer's length, covering [0, n) exactly.
TEST(LaunchShape, SquareSumChunksCoverEveryElementOnce) {
  for (int64_t n : {int64_t(1), int64_t(4095), int64_t(4096), int64_t(4097), int64_t(10'000'019), int64_t(1) << 33}) {
    const int64_t chunk = km::square_chunk(n), chunks = km::square_chunks(n);
    EXPECT_LE(chunks, km::kMaxSquareChunks) << n;
    EXPECT_GE(chunk * chunks, n);
    EXPECT_LT(chunk * (chunks - 1), n);
    EXPECT_EQ(chunk % 8, 0);
  }
  EXPECT_EQ(km::square_chunks(0), 0);
  // The same chunking as host::sum_squares, so the f64 partials are added in the same groups.
  std::vector<float> x = randn(100'003, 19);
  double ref = host::sum_squares(x.data(), DType::f32, int64_t(x.size()), false), total = 0;
  const int64_t chunk = km::square_chunk(int64_t(x.size()));
  for (int64_t c = 0; c < km::square_chunks(int64_t(x.size())); ++c) {
    double s = 0;
    for (int64_t i = c * chunk; i < std::min<int64_t>(int64_t(x.size()), (c + 1) * chunk); ++i)
      s += double(x[size_t(i)]) * double(x[size_t(i)]);
    total += s;
  }
  EXPECT_NEAR(total, ref, 1e-12 * ref);
}

TEST(LaunchShape, ColumnSlicesPartitionTheRows) {
  for (int64_t rows : {int64_t(1), int64_t(31), int64_t(64), int64_t(1000), int64_t(1) << 20}) {
    const int s = km::column_slices(rows);
    EXPECT_GE(s, 1);
    EXPECT_LE(s, km::kColumnSlices);
    EXPECT_EQ(km::slice_begin(rows, s, 0), 0);
    EXPECT_EQ(km::slice_begin(rows, s, s), rows);
    for (int i = 0; i < s; ++i) EXPECT_LE(km::slice_begin(rows, s, i), km::slice_begin(rows, s, i + 1));
  }
}

}  // namespace
}  // namespace strata
