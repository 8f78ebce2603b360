// Strata's bf16 GEMM (cpu/gemm_bf16.h) against a double reference of the same bf16
// values: every layout, the K, row and column blocks' edges, the fused bias, alpha and beta,
// bf16 output rounded once, and one thread against a team bit for bit. Skipped on a CPU without AVX512-BF16 (it then
// never runs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "cpu/gemm_bf16.h"
#include "cpu/omp_threads.h"
#include "test_util.h"

namespace strata {
namespace {

using test::randn;

struct Case {
  int64_t M, N, K;
  bool ta, tb;
  DType a, out, bias;  // a is bf16; bias f32 or bf16
  float alpha, beta;
  bool with_bias;
};

std::vector<uint16_t> to_bf16(std::vector<float>& v) {  // rounds v in place, returns the bits
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    h[i] = f32_to_bf16(v[i]);
    v[i] = bf16_to_f32(h[i]);
  }
  return h;
}

// Runs one case with `threads` threads; returns the output as f32 (bf16 outputs widened).
std::vector<float> run(const Case& c, int threads, std::vector<float>* ref_out) {
  auto A = randn(size_t(c.M * c.K), 1), B = randn(size_t(c.K * c.N), 2), C0 = randn(size_t(c.M * c.N), 3),
       bias = randn(size_t(c.N), 4);
  const auto Bh = to_bf16(B), Ah = to_bf16(A);
  std::vector<uint16_t> bias_h;
  if (c.bias == DType::bf16) bias_h = to_bf16(bias);
  const int64_t lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
  auto at = [&](int64_t m, int64_t k) { return c.ta ? A[size_t(k * lda + m)] : A[size_t(m * lda + k)]; };
  auto bt = [&](int64_t k, int64_t n) { return c.tb ? B[size_t(n * ldb + k)] : B[size_t(k * ldb + n)]; };
  if (ref_out) {
    ref_out->assign(size_t(c.M * c.N), 0.0f);
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < c.K; ++k) s += double(at(m, k)) * double(bt(k, n));
        double v = c.alpha * s + (c.with_bias ? bias[size_t(n)] : 0.0);
        if (c.out == DType::f32) v += c.beta * C0[size_t(m * c.N + n)];
        (*ref_out)[size_t(m * c.N + n)] = float(v);
      }
  }
  std::vector<float> C = C0;
  std::vector<uint16_t> Ch(C.size(), 0xffff);
  const void* pb =
      c.with_bias ? (c.bias == DType::f32 ? static_cast<const void*>(bias.data()) : bias_h.data()) : nullptr;
  const cpu::LowpOut out{c.out == DType::f32 ? static_cast<void*>(C.data()) : Ch.data(), c.out, c.N, pb, c.bias};
  const cpu::GemmOperand ga{Ah.data(), DType::bf16, lda, c.ta}, gb{Bh.data(), DType::bf16, ldb, c.tb};
  EXPECT_TRUE(cpu::gemm_bf16_accepts(ga, gb, c.beta, out));
  std::vector<char> scratch(cpu::gemm_bf16_scratch_bytes(c.M, c.N, c.K, c.out, threads));
  cpu::gemm_bf16(c.M, c.N, c.K, c.alpha, ga, gb, c.beta, out, scratch.data(), threads);
  if (c.out == DType::f32) return C;
  std::vector<float> w(C.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_f32(Ch[i]);
  return w;
}

class GemmBf16 : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!cpu::gemm_bf16_supported()) GTEST_SKIP() << "this CPU has no AVX512-BF16: the kernel never runs here";
  }
};

TEST_P(GemmBf16, MatchesDoubleReferenceAndOneThreadMatchesTheTeam) {
  const Case c = GetParam();
  std::vector<float> ref;
  const auto team = run(c, std::max(2, cpu::thread_count()), &ref);
  // Products of bf16 values are exact in f32 and the sums are f32: f32-level error. A bf16
  // output adds its one rounding.
  const double tol = c.out == DType::f32 ? 1e-4 : 1.0 / 128;
  test::expect_close(team.data(), ref.data(), ref.size(), tol, tol, "gemm_bf16");
  const auto one = run(c, 1, nullptr);
  EXPECT_EQ(0, std::memcmp(one.data(), team.data(), one.size() * 4)) << "one thread and a team differ";
}

constexpr DType f32 = DType::f32, bf = DType::bf16;
// K for two K blocks with the second partial (kKC pairs and 88 or 89 more elements).
constexpr int64_t kTwoBlocksOdd = 2 * cpu::bf16gemm::kKC + 177, kTwoBlocks = 2 * cpu::bf16gemm::kKC + 176;
INSTANTIATE_TEST_SUITE_P(
    BlocksAndLayouts, GemmBf16,
    ::testing::Values(
        // Two K blocks, two row blocks, a partial column tile; every layout; alpha and beta.
        Case{200, 70, kTwoBlocksOdd, false, false, bf, f32, f32, 0.5f, 2.0f, true},
        Case{200, 70, kTwoBlocksOdd, false, true, bf, f32, f32, 0.5f, 2.0f, false},
        Case{200, 70, kTwoBlocksOdd, true, false, bf, f32, f32, 1.0f, 1.0f, true},
        Case{200, 70, kTwoBlocksOdd, true, true, bf, f32, f32, 1.0f, 0.0f, false},
        // bf16 out with a bf16 bias: the f32 sums kept between K blocks, rounded once.
        Case{37, 45, kTwoBlocks, false, true, bf, bf, bf, 1.0f, 0.0f, true},
        Case{37, 45, kTwoBlocks, true, false, bf, bf, f32, 0.25f, 0.0f, true},
        // Odd K (the last pair half empty), small shapes.
        Case{33, 21, 7, false, true, bf, f32, f32, 0.125f, 0.0f, false},
        Case{33, 21, 7, true, true, bf, bf, f32, 1.0f, 0.0f, true},
        // More columns than one B block (4096), a single row, K = 0 (beta and bias only).
        Case{5, 4100, 40, false, true, bf, f32, f32, 1.0f, 0.0f, true},
        Case{1, 33, 3, true, false, bf, bf, bf, 1.0f, 0.0f, true},
        Case{9, 17, 0, false, false, bf, f32, f32, 1.0f, 3.0f, true}));

}  // namespace
}  // namespace strata
