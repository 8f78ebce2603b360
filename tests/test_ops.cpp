// CPU ops against straightforward references: GEMM in every transpose and dtype
// combination, attention against a naive full-softmax implementation (forward and
// backward), cross-entropy with masking and padding, and bf16 ops against f32.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"
#include "cpu/gemm_lowp.h"
#include "cpu/gemm_path.h"
#include "cpu/ops.h"
#include "host/simd.h"
#include "test_util.h"

namespace strata {
namespace {

using test::randn;

struct GemmCase {
  bool ta, tb;
  DType a, b;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

// Sizes straddle the conversion path's panel sizes (K block 256) and are not multiples of 8.
TEST_P(GemmTest, MatchesNaiveReference) {
  const GemmCase c = GetParam();
  const int64_t M = 37, N = 45, K = 300;
  auto A = randn(size_t(M * K), 1), B = randn(size_t(K * N), 2), C0 = randn(size_t(M * N), 3);
  // Round inputs to the operand dtype so the reference sees the same values.
  auto as_dtype = [](std::vector<float>& v, DType t) {
    std::vector<uint16_t> h(v.size());
    if (t == DType::f32) return h;
    convert(h.data(), t, v.data(), DType::f32, v.size());
    convert(v.data(), DType::f32, h.data(), t, v.size());
    return h;
  };
  auto Ah = as_dtype(A, c.a), Bh = as_dtype(B, c.b);
  const int64_t lda = c.ta ? M : K, ldb = c.tb ? K : N;  // stored K×M / M×K, N×K / K×N
  auto at = [&](int64_t m, int64_t k) { return c.ta ? A[size_t(k * lda + m)] : A[size_t(m * lda + k)]; };
  auto bt = [&](int64_t k, int64_t n) { return c.tb ? B[size_t(n * ldb + k)] : B[size_t(k * ldb + n)]; };
  std::vector<float> ref(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(at(m, k)) * double(bt(k, n));
      ref[size_t(m * N + n)] = float(0.5 * s + 2.0 * C0[size_t(m * N + n)]);
    }
  // The GEMM kernel's own scratch is host-addressable backend memory (never opaque).
  cpu::CpuBackend be({size_t(64) << 20, 0, /*opaque=*/false});
  cpu::Workspace ws([&](size_t n, const std::string& tag) { return be.allocate(n, tag); });
  std::vector<float> C = C0;
  const void* pa = c.a == DType::f32 ? static_cast<const void*>(A.data()) : Ah.data();
  const void* pb = c.b == DType::f32 ? static_cast<const void*>(B.data()) : Bh.data();
  cpu::gemm(M, N, K, 0.5f, {pa, c.a, lda, c.ta}, {pb, c.b, ldb, c.tb}, 2.0f, C.data(), N, ws);
  test::expect_close(C.data(), ref.data(), C.size(), 1e-4, 1e-4, "gemm");
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, GemmTest,
    ::testing::Values(GemmCase{false, false, DType::f32, DType::f32}, GemmCase{false, true, DType::f32, DType::f32},
                      GemmCase{true, false, DType::f32, DType::f32}, GemmCase{true, true, DType::f32, DType::f32},
                      GemmCase{false, false, DType::bf16, DType::bf16}, GemmCase{false, true, DType::bf16, DType::bf16},
                      GemmCase{true, false, DType::bf16, DType::bf16}, GemmCase{true, true, DType::bf16, DType::bf16},
                      GemmCase{false, false, DType::f32, DType::bf16}, GemmCase{true, false, DType::f32, DType::bf16},
                      GemmCase{false, true, DType::f16, DType::f32}, GemmCase{false, true, DType::f16, DType::f16},
                      GemmCase{true, false, DType::f16, DType::f16}));

// oneDNN's matmul primitive computes natively wherever the CPU computes in that format
// (with STRATA_LOWP_GEMM=onednn the cases above then test it: ctest's onednn.test_ops), and
// lowp_gemm declines elsewhere.
TEST(GemmLowp, NativeWhereTheCpuHasIt) {
  const int64_t M = 64, N = 96, K = 128;
  std::vector<uint16_t> a(size_t(M * K), 0x3f80), b(size_t(K * N), 0x3f80);  // bf16 ones
  std::vector<float> c(size_t(M * N), 0.0f);
  std::string impl;
  const bool native = cpu::lowp_gemm(M, N, K, 1.0f, {a.data(), DType::bf16, K, false},
                                     {b.data(), DType::bf16, N, false}, 0.0f, c.data(), N, &impl);
  const bool has = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  std::printf("bf16 GEMM: %s (%s)\n", native ? "native" : "f32 panels", impl.c_str());
  EXPECT_EQ(native, has) << "oneDNN's choice: " << impl;
  if (native) {
    EXPECT_EQ(c[0], float(K));
    EXPECT_EQ(c.back(), float(K));
  }
}

// The 16-bit path rule (cpu/gemm_path.h) for each kind of CPU the benchmark reports
// measured, and this process's path with STRATA_LOWP_GEMM unset.
TEST(GemmPath, EachMeasuredKindOfCpuTakesItsFastestPath) {
  using cpu::LowpGemm;
  const auto rule = [](bool amx, bool avx512_bf16, bool amd) {
    return cpu::default_lowp_gemm({.amx_bf16 = amx, .avx512_bf16 = avx512_bf16, .amd = amd});
  };
  EXPECT_EQ(rule(true, true, false), LowpGemm::onednn) << "Intel Xeon with AMX";
  EXPECT_EQ(rule(false, true, true), LowpGemm::strata) << "AMD EPYC with AVX512-BF16";
  EXPECT_EQ(rule(false, true, false), LowpGemm::off) << "Intel Xeon with AVX512-BF16, no AMX (half-rate vdpbf16ps)";
  EXPECT_EQ(rule(false, false, true), LowpGemm::off) << "AMD with AVX2 only";
  EXPECT_EQ(rule(false, false, false), LowpGemm::off) << "Intel with AVX2 only";
  const cpu::GemmCpu here = cpu::this_gemm_cpu();
  EXPECT_EQ(here.avx512_bf16, __builtin_cpu_supports("avx512bf16") != 0);
  EXPECT_EQ(here.amd, __builtin_cpu_is("amd") != 0);
  const char* env = std::getenv("STRATA_LOWP_GEMM");
  if (!env || std::string(env) == "auto") {
    EXPECT_EQ(cpu::lowp_gemm_mode(), cpu::default_lowp_gemm(here));
  }
  std::printf("16-bit GEMM path here: %s\n", std::string(cpu::lowp_gemm_name(cpu::lowp_gemm_mode())).c_str());
}

// The LM head's backward with bf16 operands and an f32 dout (the logits' gradient). On a
// native path dout goes in as hi = bf16(dout) and lo = dout − hi, in blocks of 4096 columns
// (5003 leaves a tail); on the panels it is exact. Either way both products stay within a
// few units of f32's rounding of the double reference: rounding dout to bf16 once (2^-9)
// would not.
void check_linear_backward_f32_dout(int64_t N, int64_t C, int64_t OC, const std::vector<float>& dout) {
  const auto x = randn(size_t(N * C), 51), w = randn(size_t(OC * C), 52, 0.1f);
  const auto dw0 = randn(size_t(OC * C), 54, 1e-3f);
  std::vector<bf16> xh(x.size()), wh(w.size());
  for (size_t i = 0; i < x.size(); ++i) xh[i] = from_f32<bf16>(x[i]);
  for (size_t i = 0; i < w.size(); ++i) wh[i] = from_f32<bf16>(w[i]);
  std::vector<double> dx_ref(size_t(N * C), 0.0), dw_ref(dw0.begin(), dw0.end());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t c = 0; c < C; ++c) {
        const double d = dout[size_t(n * OC + o)], xv = to_f32(xh[size_t(n * C + c)]);
        dx_ref[size_t(n * C + c)] += d * double(to_f32(wh[size_t(o * C + c)]));
        dw_ref[size_t(o * C + c)] += d * xv;
      }
  const std::vector<float> dx_reff(dx_ref.begin(), dx_ref.end()), dw_reff(dw_ref.begin(), dw_ref.end());
  auto max_abs = [](const std::vector<double>& v) {
    double m = 0;
    for (double e : v) m = std::max(m, std::fabs(e));
    return m;
  };
  cpu::CpuBackend be({size_t(256) << 20, 0});
  for (DType dx_t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE("dinp " + std::string(dtype_name(dx_t)));
    std::vector<float> dx(size_t(N * C)), dw = dw0;
    std::vector<bf16> dxh(dx.size());
    void* dxp = dx_t == DType::f32 ? static_cast<void*>(dx.data()) : static_cast<void*>(dxh.data());
    be.matmul_backward({dxp, dx_t, {N, C}}, {dw.data(), DType::f32, {OC, C}}, {},
                       {const_cast<float*>(dout.data()), DType::f32, {N, OC}}, {xh.data(), DType::bf16, {N, C}},
                       {wh.data(), DType::bf16, {OC, C}});
    if (dx_t == DType::bf16)
      for (size_t i = 0; i < dx.size(); ++i) dx[i] = to_f32(dxh[i]);
    // Sums that cancel make per-element relative bounds meaningless: the absolute part is
    // 1e-4 of the largest value. Worst errors measured against it (random dout): one bf16
    // rounding of dout ~10x over; the two terms ~30-50x inside; the panels ~300-700x inside.
    test::expect_close(dx.data(), dx_reff.data(), dx.size(), 1e-4 * max_abs(dx_ref), dx_t == DType::f32 ? 1e-4 : 8e-3,
                       "dinp");
    test::expect_close(dw.data(), dw_reff.data(), dw.size(), 1e-4 * max_abs(dw_ref), 1e-4, "dweight");
  }
}

// A dout of no particular shape: lo goes in dense, as a second GEMM.
TEST(Ops, LinearBackwardWithAnF32DoutKeepsItsPrecision) {
  const int64_t N = 12, C = 40, OC = 5003;  // tails: 4 rows past 8, 3 columns past 8
  check_linear_backward_f32_dout(N, C, OC, randn(size_t(N * OC), 53, 1e-3f));
}

// A cross-entropy's gradient, (softmax − one-hot)/N: lo goes in sparse (cpu/dout_split.h),
// the target's and the large probabilities' alone, into dinp and dW alike (without the sparse
// dW, 58 of dW's 200120 elements fall out of tolerance).
TEST(Ops, LinearBackwardWithACrossEntropyDoutKeepsItsPrecision) {
  const int64_t N = 45, C = 40, OC = 5003;                    // tails: 5 rows past 40
  std::vector<float> dout = randn(size_t(N * OC), 55, 3.0f);  // logits, then their gradient
  const auto targets = test::random_tokens(size_t(N), int(OC), 56);
  for (int64_t n = 0; n < N; ++n) {
    float* row = dout.data() + n * OC;
    double most = -1e30, sum = 0;
    for (int64_t o = 0; o < OC; ++o) most = std::max(most, double(row[o]));
    for (int64_t o = 0; o < OC; ++o) sum += std::exp(double(row[o]) - most);
    for (int64_t o = 0; o < OC; ++o)
      row[o] = float((std::exp(double(row[o]) - most) / sum - (o == targets[size_t(n)] ? 1.0 : 0.0)) / double(N));
  }
  check_linear_backward_f32_dout(N, C, OC, dout);
}

// Naive attention: full T×T softmax per head, in double; `window` > 0: query t sees keys
// t-window < j ≤ t only.
void naive_attention(std::vector<double>& out, const std::vector<float>& qkv, int B, int T, int C, int NH,
                     int window = 0, double scale = 0, double softcap = 0) {
  const int hd = C / NH;
  out.assign(size_t(B * T * C), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int lo = window > 0 ? std::max(0, t - window + 1) : 0;
        std::vector<double> s(size_t(t + 1), 0.0);
        double mx = -1e300;
        for (int j = lo; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += double(qkv[size_t((b * T + t) * 3 * C + h * hd + i)]) *
                 double(qkv[size_t((b * T + j) * 3 * C + C + h * hd + i)]);
          s[size_t(j)] = scale > 0 ? d * scale : d / std::sqrt(double(hd));
          if (softcap > 0) s[size_t(j)] = softcap * std::tanh(s[size_t(j)] / softcap);
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int j = lo; j <= t; ++j) sum += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
        for (int j = lo; j <= t; ++j)
          for (int i = 0; i < hd; ++i)
            out[size_t((b * T + t) * C + h * hd + i)] +=
                s[size_t(j)] / sum * double(qkv[size_t((b * T + j) * 3 * C + 2 * C + h * hd + i)]);
      }
}

TEST(Attention, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 13, C = 12, NH = 3;
  auto qkv = randn(size_t(B * T * 3 * C), 11);
  std::vector<float> out(size_t(B * T * C)), lse(size_t(B * NH * T));
  cpu::CpuBackend be({size_t(64) << 20, 0});
  TensorView qv{qkv.data(), DType::f32, {B, T, 3 * C}}, ov{out.data(), DType::f32, {B, T, C}},
      lv{lse.data(), DType::f32, {B, NH, T}};
  be.attention_forward(ov, lv, qv, NH);
  std::vector<double> ref;
  naive_attention(ref, qkv, B, T, C, NH);
  std::vector<float> reff(ref.begin(), ref.end());
  test::expect_close(out.data(), reff.data(), out.size(), 1e-6, 1e-5, "attention out");

  // Backward of L = Σ out·w against central differences of the naive forward.
  auto w = randn(out.size(), 12);
  std::vector<float> dqkv(qkv.size());
  TensorView dq{dqkv.data(), DType::f32, {B, T, 3 * C}}, dov{w.data(), DType::f32, {B, T, C}};
  be.attention_backward(dq, dov, qv, ov, lv, NH);
  std::vector<float> fd(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) {
    const float saved = qkv[i];
    double lp = 0, lm = 0;
    qkv[i] = saved + 1e-3f;
    naive_attention(ref, qkv, B, T, C, NH);
    for (size_t k = 0; k < ref.size(); ++k) lp += ref[k] * w[k];
    qkv[i] = saved - 1e-3f;
    naive_attention(ref, qkv, B, T, C, NH);
    for (size_t k = 0; k < ref.size(); ++k) lm += ref[k] * w[k];
    qkv[i] = saved;
    fd[i] = float((lp - lm) / 2e-3);
  }
  test::expect_close(dqkv.data(), fd.data(), fd.size(), 1e-4, 1e-3, "attention dqkv");
}

// The gradients of naive_attention's output against dout, in double: the same formulas, the
// whole causal triangle, no blocking.
void naive_attention_backward(std::vector<double>& dqkv, const std::vector<float>& qkv, const std::vector<float>& dout,
                              int B, int T, int C, int NH, int window = 0) {
  const int hd = C / NH;
  const double sc = 1.0 / std::sqrt(double(hd));
  dqkv.assign(qkv.size(), 0.0);
  auto at = [&](int b, int t, int part, int h, int i) { return size_t((b * T + t) * 3 * C + part * C + h * hd + i); };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int lo = window > 0 ? std::max(0, t - window + 1) : 0;
        std::vector<double> p(size_t(t + 1), 0.0), dp(size_t(t + 1), 0.0);
        double mx = -1e300, sum = 0, D = 0;
        for (int j = lo; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hd; ++i) d += double(qkv[at(b, t, 0, h, i)]) * double(qkv[at(b, j, 1, h, i)]);
          mx = std::max(mx, p[size_t(j)] = d * sc);
        }
        for (int j = lo; j <= t; ++j) sum += (p[size_t(j)] = std::exp(p[size_t(j)] - mx));
        for (int j = lo; j <= t; ++j) {
          p[size_t(j)] /= sum;
          double d = 0;
          for (int i = 0; i < hd; ++i)
            d += double(dout[size_t((b * T + t) * C + h * hd + i)]) * double(qkv[at(b, j, 2, h, i)]);
          dp[size_t(j)] = d;
          D += p[size_t(j)] * d;
        }
        for (int j = lo; j <= t; ++j) {
          const double ds = p[size_t(j)] * (dp[size_t(j)] - D);
          for (int i = 0; i < hd; ++i) {
            dqkv[at(b, t, 0, h, i)] += ds * double(qkv[at(b, j, 1, h, i)]) * sc;
            dqkv[at(b, j, 1, h, i)] += ds * double(qkv[at(b, t, 0, h, i)]) * sc;
            dqkv[at(b, j, 2, h, i)] += p[size_t(j)] * double(dout[size_t((b * T + t) * C + h * hd + i)]);
          }
        }
      }
}

// The op computes causality in blocks of query rows (only the blocks on and below the
// diagonal): sequences of several blocks with a partial last one, forward and backward
// against the unblocked formulas.
TEST(Attention, CausalBlocksMatchTheWholeTriangle) {
  for (const int T : {64, 65, 150, 256}) {
    const int B = 2, C = 16, NH = 2;
    auto qkv = randn(size_t(B * T * 3 * C), 31), w = randn(size_t(B * T * C), 32);
    std::vector<float> out(w.size()), lse(size_t(B * NH * T)), dqkv(qkv.size());
    cpu::CpuBackend be({size_t(64) << 20, 0});
    TensorView qv{qkv.data(), DType::f32, {B, T, 3 * C}}, ov{out.data(), DType::f32, {B, T, C}},
        lv{lse.data(), DType::f32, {B, NH, T}};
    be.attention_forward(ov, lv, qv, NH);
    be.attention_backward({dqkv.data(), DType::f32, {B, T, 3 * C}}, {w.data(), DType::f32, {B, T, C}}, qv, ov, lv, NH);
    std::vector<double> ref, dref;
    naive_attention(ref, qkv, B, T, C, NH);
    naive_attention_backward(dref, qkv, w, B, T, C, NH);
    std::vector<float> reff(ref.begin(), ref.end()), dreff(dref.begin(), dref.end());
    const std::string at = " (T = " + std::to_string(T) + ")";
    test::expect_close(out.data(), reff.data(), out.size(), 1e-5, 1e-5, "attention out" + at);
    test::expect_close(dqkv.data(), dreff.data(), dqkv.size(), 1e-4, 1e-4, "attention dqkv" + at);
  }
}

// A sliding window (Mistral, Gemma's local layers): query t sees keys t-W < j ≤ t. Windows of
// one key, inside one causal block and across blocks, in f32 against the naive formulas,
// and in bf16 (the score GEMMs on the bf16 path, the window in the f32 rows) against f32.
TEST(Attention, SlidingWindowMatchesTheNaiveWindow) {
  for (const auto& [T, W] : {std::pair{65, 1}, {65, 16}, {150, 70}, {150, 149}}) {
    SCOPED_TRACE("T " + std::to_string(T) + ", window " + std::to_string(W));
    const int B = 2, C = 32, NH = 2;
    auto qkv = randn(size_t(B * T * 3 * C), 41), w = randn(size_t(B * T * C), 42);
    for (auto* v : {&qkv, &w})
      for (float& e : *v) e = bf16_to_f32(f32_to_bf16(e));
    std::vector<float> out(w.size()), lse(size_t(B * NH * T)), dqkv(qkv.size());
    cpu::CpuBackend be({size_t(64) << 20, 0});
    TensorView qv{qkv.data(), DType::f32, {B, T, 3 * C}}, ov{out.data(), DType::f32, {B, T, C}},
        lv{lse.data(), DType::f32, {B, NH, T}};
    be.attention_forward(ov, lv, qv, NH, {}, {W});
    be.attention_backward({dqkv.data(), DType::f32, {B, T, 3 * C}}, {w.data(), DType::f32, {B, T, C}}, qv, ov, lv, NH,
                          {}, {W});
    std::vector<double> ref, dref;
    naive_attention(ref, qkv, B, T, C, NH, W);
    naive_attention_backward(dref, qkv, w, B, T, C, NH, W);
    std::vector<float> reff(ref.begin(), ref.end()), dreff(dref.begin(), dref.end());
    test::expect_close(out.data(), reff.data(), out.size(), 1e-5, 1e-5, "windowed attention out");
    test::expect_close(dqkv.data(), dreff.data(), dqkv.size(), 1e-4, 1e-4, "windowed attention dqkv");

    std::vector<bf16> qh(qkv.size()), wh(w.size()), oh(w.size()), dh(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) qh[i] = from_f32<bf16>(qkv[i]);
    for (size_t i = 0; i < w.size(); ++i) wh[i] = from_f32<bf16>(w[i]);
    std::vector<float> lse_h(lse.size());
    be.attention_forward({oh.data(), DType::bf16, {B, T, C}}, {lse_h.data(), DType::f32, {B, NH, T}},
                         {qh.data(), DType::bf16, {B, T, 3 * C}}, NH, {}, {W});
    be.attention_backward({dh.data(), DType::bf16, {B, T, 3 * C}}, {wh.data(), DType::bf16, {B, T, C}},
                          {qh.data(), DType::bf16, {B, T, 3 * C}}, {oh.data(), DType::bf16, {B, T, C}},
                          {lse_h.data(), DType::f32, {B, NH, T}}, NH, {}, {W});
    std::vector<float> of(oh.size()), df(dh.size());
    for (size_t i = 0; i < oh.size(); ++i) of[i] = to_f32(oh[i]);
    for (size_t i = 0; i < dh.size(); ++i) df[i] = to_f32(dh[i]);
    test::expect_close(of.data(), out.data(), out.size(), 1.0 / 64, 1.0 / 64, "bf16 windowed attention out");
    test::expect_close(df.data(), dqkv.data(), dqkv.size(), 1.0 / 32, 1.0 / 32, "bf16 windowed attention dqkv");
  }
}

// Gemma's scores: a scale of its own and a soft-cap, with a window: the forward against the
// naive formulas, the backward against central differences of them.
TEST(Attention, ScaleAndSoftCapMatchTheNaiveFormulas) {
  const int B = 1, T = 12, C = 8, NH = 2;
  const AttentionSpec spec{5, 0.7f, 1.2f};
  auto qkv = randn(size_t(B * T * 3 * C), 51);
  std::vector<float> out(size_t(B * T * C)), lse(size_t(B * NH * T));
  cpu::CpuBackend be({size_t(64) << 20, 0});
  TensorView qv{qkv.data(), DType::f32, {B, T, 3 * C}}, ov{out.data(), DType::f32, {B, T, C}},
      lv{lse.data(), DType::f32, {B, NH, T}};
  be.attention_forward(ov, lv, qv, NH, {}, spec);
  std::vector<double> ref;
  naive_attention(ref, qkv, B, T, C, NH, spec.window, spec.scale, spec.softcap);
  std::vector<float> reff(ref.begin(), ref.end());
  test::expect_close(out.data(), reff.data(), out.size(), 1e-6, 1e-5, "capped attention out");
  auto w = randn(out.size(), 52);
  std::vector<float> dqkv(qkv.size()), fd(qkv.size());
  be.attention_backward({dqkv.data(), DType::f32, {B, T, 3 * C}}, {w.data(), DType::f32, {B, T, C}}, qv, ov, lv, NH, {},
                        spec);
  for (size_t i = 0; i < qkv.size(); ++i) {
    const float saved = qkv[i];
    double lp = 0, lm = 0;
    qkv[i] = saved + 1e-3f;
    naive_attention(ref, qkv, B, T, C, NH, spec.window, spec.scale, spec.softcap);
    for (size_t k = 0; k < ref.size(); ++k) lp += ref[k] * w[k];
    qkv[i] = saved - 1e-3f;
    naive_attention(ref, qkv, B, T, C, NH, spec.window, spec.scale, spec.softcap);
    for (size_t k = 0; k < ref.size(); ++k) lm += ref[k] * w[k];
    qkv[i] = saved;
    fd[i] = float((lp - lm) / 2e-3);
  }
  test::expect_close(dqkv.data(), fd.data(), fd.size(), 1e-4, 1e-3, "capped attention dqkv");
}

// In bf16 attention agrees with the f32 op on the same rounded inputs, forward and backward, within one bf16
// rounding of its outputs. Where Strata's bf16 kernel runs, its two score GEMMs read q, k, dO and v there (the
// probabilities and dS stay f32); on AMX (heads of T and hd multiples of 32) every product runs on tiles, the
// probabilities and dS rounded to bf16.
TEST(Attention, Bf16AgreesWithF32) {
  // 1-4 causal blocks; hd 32, 64 (T 96 and 256 with hd 64 take the AMX tiles where they run),
  // without and with attention dropout (the tiles' fused softmax rows, and the f32 rows).
  for (const auto& [T, C, p] :
       {std::tuple{40, 64, 0.0f}, {150, 64, 0.0f}, {96, 64, 0.0f}, {256, 128, 0.0f}, {96, 64, 0.2f}, {150, 64, 0.2f}}) {
    SCOPED_TRACE("T " + std::to_string(T) + ", C " + std::to_string(C) + ", dropout " + std::to_string(p));
    const DropoutSpec drop = p > 0 ? make_dropout(p, 11, 3, 0) : DropoutSpec{};
    const int B = 2, NH = 2;
    auto qkv = randn(size_t(B * T * 3 * C), 21), w = randn(size_t(B * T * C), 22);
    for (auto* v : {&qkv, &w})
      for (float& e : *v) e = bf16_to_f32(f32_to_bf16(e));
    std::vector<bf16> qh(qkv.size()), wh(w.size()), oh(w.size()), dh(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) qh[i] = from_f32<bf16>(qkv[i]);
    for (size_t i = 0; i < w.size(); ++i) wh[i] = from_f32<bf16>(w[i]);
    std::vector<float> out(w.size()), lse(size_t(B * NH * T)), lse_h(lse.size()), dqkv(qkv.size());
    cpu::CpuBackend be({size_t(64) << 20, 0});
    be.attention_forward({out.data(), DType::f32, {B, T, C}}, {lse.data(), DType::f32, {B, NH, T}},
                         {qkv.data(), DType::f32, {B, T, 3 * C}}, NH, drop);
    be.attention_forward({oh.data(), DType::bf16, {B, T, C}}, {lse_h.data(), DType::f32, {B, NH, T}},
                         {qh.data(), DType::bf16, {B, T, 3 * C}}, NH, drop);
    std::vector<float> of(oh.size());
    for (size_t i = 0; i < oh.size(); ++i) of[i] = to_f32(oh[i]);
    test::expect_close(of.data(), out.data(), out.size(), 1.0 / 128, 1.0 / 128, "bf16 attention out");
    test::expect_close(lse_h.data(), lse.data(), lse.size(), 1e-2, 1e-3, "bf16 attention lse");
    // Backward from the same (bf16) forward output for both.
    std::vector<float> o_round(of);
    be.attention_backward({dqkv.data(), DType::f32, {B, T, 3 * C}}, {w.data(), DType::f32, {B, T, C}},
                          {qkv.data(), DType::f32, {B, T, 3 * C}}, {o_round.data(), DType::f32, {B, T, C}},
                          {lse_h.data(), DType::f32, {B, NH, T}}, NH, drop);
    be.attention_backward({dh.data(), DType::bf16, {B, T, 3 * C}}, {wh.data(), DType::bf16, {B, T, C}},
                          {qh.data(), DType::bf16, {B, T, 3 * C}}, {oh.data(), DType::bf16, {B, T, C}},
                          {lse_h.data(), DType::f32, {B, NH, T}}, NH, drop);
    std::vector<float> df(dh.size());
    for (size_t i = 0; i < dh.size(); ++i) df[i] = to_f32(dh[i]);
    test::expect_close(df.data(), dqkv.data(), dqkv.size(), 1.0 / 128, 1.0 / 128, "bf16 attention dqkv");
  }
}

// Gemma-2's final soft-cap: the loss of cap·tanh(x/cap) and its gradient to x, against
// double-precision formulas and central differences.
TEST(CrossEntropy, SoftCappedLogits) {
  const int N = 3, V = 7, Vp = 8;
  const float cap = 2.5f, dloss = 0.5f;
  auto logits = randn(size_t(N * Vp), 23, 3.0f);
  const std::vector<float> orig = logits;
  std::vector<int32_t> targets{2, -1, 6};
  std::vector<float> losses(N);
  cpu::CpuBackend be({size_t(1) << 20, 1});
  double total = 0;
  be.cross_entropy_forward_backward({losses.data(), DType::f32, {N}}, {logits.data(), DType::f32, {N, Vp}}, targets, V,
                                    dloss, &total, 1.0, 1.0, cap);
  auto loss_of = [&](const std::vector<double>& z, int t) {
    double mx = -1e300, s = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, cap * std::tanh(z[size_t(v)] / cap));
    for (int v = 0; v < V; ++v) s += std::exp(cap * std::tanh(z[size_t(v)] / cap) - mx);
    return mx + std::log(s) - cap * std::tanh(z[size_t(t)] / cap);
  };
  for (int n = 0; n < N; ++n) {
    std::vector<double> z(orig.begin() + n * Vp, orig.begin() + n * Vp + V);
    if (targets[size_t(n)] < 0) {
      EXPECT_EQ(losses[size_t(n)], 0.0f);
      continue;
    }
    EXPECT_NEAR(losses[size_t(n)], loss_of(z, targets[size_t(n)]), 1e-5);
    for (int v = 0; v < V; ++v) {
      std::vector<double> zp = z, zm = z;
      zp[size_t(v)] += 1e-4, zm[size_t(v)] -= 1e-4;
      const double fd = dloss * (loss_of(zp, targets[size_t(n)]) - loss_of(zm, targets[size_t(n)])) / 2e-4;
      EXPECT_NEAR(logits[size_t(n * Vp + v)], fd, 1e-5) << "row " << n << " logit " << v;
    }
    EXPECT_EQ(logits[size_t(n * Vp + V)], 0.0f);  // the padded column
  }
}

TEST(CrossEntropy, MaskedAndPaddedColumns) {
  const int N = 3, V = 5, Vp = 8;
  auto logits = randn(size_t(N * Vp), 21);
  const std::vector<float> orig = logits;
  std::vector<int32_t> targets{2, -1, 4};
  std::vector<float> losses(N);
  cpu::CpuBackend be({size_t(1) << 20, 1});
  double total = 1.5;  // the op adds Σ losses / divisor · weight to it
  be.cross_entropy_forward_backward({losses.data(), DType::f32, {N}}, {logits.data(), DType::f32, {N, Vp}}, targets, V,
                                    0.5f, &total, 4.0, 2.0);
  total = (total - 1.5) * 2.0;
  double expect_total = 0;
  for (int n = 0; n < N; ++n) {
    if (targets[size_t(n)] < 0) {
      EXPECT_EQ(losses[size_t(n)], 0.0f);
      for (int v = 0; v < Vp; ++v) EXPECT_EQ(logits[size_t(n * Vp + v)], 0.0f);
      continue;
    }
    double mx = -1e9, s = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, double(orig[size_t(n * Vp + v)]));
    for (int v = 0; v < V; ++v) s += std::exp(orig[size_t(n * Vp + v)] - mx);
    const double lse = mx + std::log(s), l = lse - orig[size_t(n * Vp + targets[size_t(n)])];
    expect_total += l;
    EXPECT_NEAR(losses[size_t(n)], l, 1e-5);
    for (int v = 0; v < V; ++v) {
      const double g = 0.5 * (std::exp(orig[size_t(n * Vp + v)] - lse) - (v == targets[size_t(n)]));
      EXPECT_NEAR(logits[size_t(n * Vp + v)], g, 1e-6);
    }
    for (int v = V; v < Vp; ++v) EXPECT_EQ(logits[size_t(n * Vp + v)], 0.0f);  // padding gets no gradient
  }
  EXPECT_NEAR(total, expect_total, 1e-5);
  std::vector<int32_t> bad{7, 0, 0};
  EXPECT_THROW(be.cross_entropy_forward_backward({losses.data(), DType::f32, {N}}, {logits.data(), DType::f32, {N, Vp}},
                                                 bad, V, 1.0f, nullptr, 1.0, 1.0),
               Error);
}

TEST(Embedding, RepeatedTokensAccumulate) {
  const int B = 2, T = 3, C = 4, V = 6;
  auto wte = randn(size_t(V * C), 31), wpe = randn(size_t(T * C), 32), dout = randn(size_t(B * T * C), 33);
  std::vector<int32_t> tokens{1, 1, 5, 1, 0, 5};
  std::vector<float> out(size_t(B * T * C)), dwte(size_t(V * C)), dwpe(size_t(T * C));
  cpu::CpuBackend be({size_t(1) << 20, 0});
  be.encoder_forward({out.data(), DType::f32, {B, T, C}}, tokens, {wte.data(), DType::f32, {V, C}},
                     {wpe.data(), DType::f32, {T, C}});
  be.encoder_backward({dwte.data(), DType::f32, {V, C}}, {dwpe.data(), DType::f32, {T, C}},
                      {dout.data(), DType::f32, {B, T, C}}, tokens);
  std::vector<float> ew(size_t(V * C)), ep(size_t(T * C));
  for (int n = 0; n < B * T; ++n)
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(out[size_t(n * C + c)], wte[size_t(tokens[size_t(n)] * C + c)] + wpe[size_t((n % T) * C + c)]);
      ew[size_t(tokens[size_t(n)] * C + c)] += dout[size_t(n * C + c)];
      ep[size_t((n % T) * C + c)] += dout[size_t(n * C + c)];
    }
  test::expect_close(dwte.data(), ew.data(), ew.size(), 1e-6, 0, "dwte");
  test::expect_close(dwpe.data(), ep.data(), ep.size(), 1e-6, 0, "dwpe");
  std::vector<int32_t> bad{1, 1, 6, 1, 0, 5};
  EXPECT_THROW(be.encoder_forward({out.data(), DType::f32, {B, T, C}}, bad, {wte.data(), DType::f32, {V, C}},
                                  {wpe.data(), DType::f32, {T, C}}),
               Error);
}

// SwiGLU computes in f32 whatever the activations' type (vectors of 8 or 16 lanes, the row's
// tail through padded copies): on bf16 inputs its outputs are the f32 op's on the same values,
// rounded once.
TEST(Bf16Ops, SwiGluIsTheF32OpRoundedOnce) {
  const int N = 5, I = 37;  // 4 vectors and a tail of 5 per row
  auto gu = randn(size_t(N * 2 * I), 51, 3.0f), dy = randn(size_t(N * I), 52);
  for (auto* v : {&gu, &dy})
    for (float& e : *v) e = bf16_to_f32(f32_to_bf16(e));
  std::vector<bf16> guh(gu.size()), dyh(dy.size()), yh(dy.size()), dguh(gu.size());
  for (size_t i = 0; i < gu.size(); ++i) guh[i] = from_f32<bf16>(gu[i]);
  for (size_t i = 0; i < dy.size(); ++i) dyh[i] = from_f32<bf16>(dy[i]);
  std::vector<float> y(dy.size()), dgu(gu.size());
  cpu::CpuBackend be({size_t(16) << 20, 0});
  be.swiglu_forward({y.data(), DType::f32, {N, I}}, {gu.data(), DType::f32, {N, 2 * I}});
  be.swiglu_forward({yh.data(), DType::bf16, {N, I}}, {guh.data(), DType::bf16, {N, 2 * I}});
  be.swiglu_backward({dgu.data(), DType::f32, {N, 2 * I}}, {gu.data(), DType::f32, {N, 2 * I}},
                     {dy.data(), DType::f32, {N, I}});
  be.swiglu_backward({dguh.data(), DType::bf16, {N, 2 * I}}, {guh.data(), DType::bf16, {N, 2 * I}},
                     {dyh.data(), DType::bf16, {N, I}});
  for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(yh[i].bits, f32_to_bf16(y[i])) << "swiglu at " << i;
  for (size_t i = 0; i < dgu.size(); ++i) ASSERT_EQ(dguh[i].bits, f32_to_bf16(dgu[i])) << "swiglu' at " << i;
}

// Grouped-query attention's expansion copies each kv head to its g query heads, and the
// reduction sums each kv head's g gradients in f32, in head order, rounded once: head size 20
// takes a vector of 8 lanes twice and a tail of 4.
TEST(LlamaOps, GqaExpandCopiesAndReduceSumsInHeadOrder) {
  const int N = 3, NH = 6, NKV = 2, d = 20, g = NH / NKV;
  const int Wf = (NH + 2 * NKV) * d, Wp = 3 * NH * d;
  const auto fused = randn(size_t(N * Wf), 61), dpacked = randn(size_t(N * Wp), 62);
  cpu::CpuBackend be({size_t(16) << 20, 0});
  std::vector<float> packed(size_t(N * Wp)), dfused(size_t(N * Wf));
  be.gqa_expand({packed.data(), DType::f32, {N, Wp}}, {const_cast<float*>(fused.data()), DType::f32, {N, Wf}}, NH, NKV,
                d);
  be.gqa_reduce({dfused.data(), DType::f32, {N, Wf}}, {const_cast<float*>(dpacked.data()), DType::f32, {N, Wp}}, NH,
                NKV, d);
  std::vector<bf16> dph(dpacked.size()), dfh(dfused.size());
  for (size_t i = 0; i < dph.size(); ++i) dph[i] = from_f32<bf16>(dpacked[i]);
  be.gqa_reduce({dfh.data(), DType::bf16, {N, Wf}}, {dph.data(), DType::bf16, {N, Wp}}, NH, NKV, d);
  for (int n = 0; n < N; ++n) {
    for (int i = 0; i < NH * d; ++i) {  // q: copied both ways
      ASSERT_EQ(packed[size_t(n * Wp + i)], fused[size_t(n * Wf + i)]);
      ASSERT_EQ(dfused[size_t(n * Wf + i)], dpacked[size_t(n * Wp + i)]);
    }
    for (int part = 1; part <= 2; ++part)
      for (int j = 0; j < NKV; ++j)
        for (int i = 0; i < d; ++i) {
          const size_t f = size_t(n * Wf + NH * d + (part - 1) * NKV * d + j * d + i);
          float sum = 0, sum16 = 0;
          for (int r = 0; r < g; ++r) {
            const size_t p = size_t(n * Wp + part * NH * d + (j * g + r) * d + i);
            ASSERT_EQ(packed[p], fused[f]) << "expand: part " << part << ", query head " << j * g + r;
            sum += dpacked[p];
            sum16 += to_f32(dph[p]);
          }
          ASSERT_EQ(dfused[f], sum) << "reduce: part " << part << ", kv head " << j << ", element " << i;
          ASSERT_EQ(dfh[f].bits, f32_to_bf16(sum16)) << "bf16 reduce: part " << part << ", kv head " << j;
        }
  }
}

// bf16 activations through layernorm, matmul, GELU and attention agree with f32 within
// bf16's precision (inputs rounded to bf16 first, so only the op's own rounding differs).
TEST(Bf16Ops, AgreeWithF32WithinBf16Precision) {
  const int N = 24, C = 32, OC = 40;
  auto x = randn(size_t(N * C), 41), w = randn(size_t(OC * C), 42, 0.2f), b = randn(size_t(OC), 43);
  auto round_bf16 = [](std::vector<float>& v) {
    for (auto& e : v) e = bf16_to_f32(f32_to_bf16(e));
  };
  round_bf16(x), round_bf16(w), round_bf16(b);
  auto to_bf16 = [](const std::vector<float>& v) {
    std::vector<bf16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = from_f32<bf16>(v[i]);
    return h;
  };
  auto xh = to_bf16(x), wh = to_bf16(w), bh = to_bf16(b);
  cpu::CpuBackend be({size_t(64) << 20, 0});
  std::vector<float> y(size_t(N * OC));
  std::vector<bf16> yh(size_t(N * OC));
  be.matmul_forward({y.data(), DType::f32, {N, OC}}, {x.data(), DType::f32, {N, C}}, {w.data(), DType::f32, {OC, C}},
                    {b.data(), DType::f32, {OC}});
  be.matmul_forward({yh.data(), DType::bf16, {N, OC}}, {xh.data(), DType::bf16, {N, C}},
                    {wh.data(), DType::bf16, {OC, C}}, {bh.data(), DType::bf16, {OC}});
  std::vector<float> yb(yh.size());
  for (size_t i = 0; i < yh.size(); ++i) yb[i] = to_f32(yh[i]);
  test::expect_close(yb.data(), y.data(), y.size(), 1e-3, 8e-3, "bf16 matmul");  // one rounding: 2^-9 rel

  std::vector<float> g(y.size());
  std::vector<bf16> gh(y.size());
  be.gelu_forward({g.data(), DType::f32, {N, OC}}, {yb.data(), DType::f32, {N, OC}});
  be.gelu_forward({gh.data(), DType::bf16, {N, OC}}, {yh.data(), DType::bf16, {N, OC}});
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(to_f32(gh[i]), g[i], 1e-3 + 8e-3 * std::fabs(g[i]));
}

// The fused linear layer + GELU (GPT-2's MLP up-projection) is bit for bit the two ops
// it replaces, in f32 and bf16, with and without a bias, at a width that leaves a tail.
TEST(Ops, MatmulGeluIsMatmulThenGeluBitForBit) {
  const int64_t N = 9, C = 24, OC = 45;
  for (DType t : {DType::f32, DType::bf16}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + (with_bias ? " with bias" : " without bias"));
      const size_t es = dtype_size(t);
      auto mk = [&](size_t n, uint64_t seed) {
        const auto f = randn(n, seed);
        std::vector<uint8_t> v(n * es);
        convert(v.data(), t, f.data(), DType::f32, n);
        return v;
      };
      auto x = mk(size_t(N * C), 31), w = mk(size_t(OC * C), 32), b = mk(size_t(OC), 33);
      std::vector<uint8_t> pre1(size_t(N * OC) * es), out1(pre1.size()), pre2(pre1.size()), out2(pre1.size());
      cpu::CpuBackend be({size_t(64) << 20, 0});
      const TensorView xv{x.data(), t, {N, C}}, wv{w.data(), t, {OC, C}},
          bv = with_bias ? TensorView{b.data(), t, {OC}} : TensorView{};
      be.matmul_forward({pre1.data(), t, {N, OC}}, xv, wv, bv);
      be.gelu_forward({out1.data(), t, {N, OC}}, {pre1.data(), t, {N, OC}});
      be.matmul_gelu_forward({out2.data(), t, {N, OC}}, {pre2.data(), t, {N, OC}}, xv, wv, bv);
      EXPECT_EQ(pre1, pre2) << "pre";
      EXPECT_EQ(out1, out2) << "gelu";
    }
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// The vectorised exp and tanh used by softmax, cross-entropy and GELU: within 3 ulp of
// libm over the useful range, 0 on underflow, NaN kept.
TEST(Simd, ExpAndTanhAgreeWithLibm) {
  double worst_exp = 0, worst_tanh = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    float in[8], out[8];
    for (int i = 0; i < 8; ++i) in[i] = x + float(i) * 0.0017f;
    _mm256_storeu_ps(out, simd::exp8(_mm256_loadu_ps(in)));
    for (int i = 0; i < 8; ++i) {
      const double ref = std::exp(double(in[i]));
      worst_exp = std::max(worst_exp, std::fabs(out[i] - ref) / ref);
    }
    if (std::fabs(x) < 12.0f) {
      _mm256_storeu_ps(out, simd::tanh8(_mm256_loadu_ps(in)));
      for (int i = 0; i < 8; ++i) worst_tanh = std::max(worst_tanh, std::fabs(out[i] - std::tanh(double(in[i]))));
    }
  }
  EXPECT_LT(worst_exp, 3 * 0x1p-23) << "exp8 relative error";
  EXPECT_LT(worst_tanh, 4 * 0x1p-24) << "tanh8 absolute error";
  float in[8] = {-200.0f, -88.0f, NAN, 0.0f, 1.0f, -1.0f, 88.0f, -INFINITY}, out[8];
  _mm256_storeu_ps(out, simd::exp8(_mm256_loadu_ps(in)));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[7], 0.0f);
}

}  // namespace
}  // namespace strata
