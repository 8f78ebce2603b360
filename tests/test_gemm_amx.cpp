// Strata's AMX tile GEMM (cpu/gemm_amx.h) against a double reference of the same bf16
// values: B packed from rows (bᵀ, the score GEMMs' keys) and from columns, A read in place
// with a row stride wider than K, a column offset into the packed B, fewer of its rows than
// were packed, and alpha. Products of
// bf16 are exact in f32, so the only error is f32 accumulation. Skipped on a CPU without AMX
// (it then never runs).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "cpu/gemm_amx.h"
#include "test_util.h"

namespace strata {
namespace {

std::vector<bf16> rounded(const std::vector<float>& v) {
  std::vector<bf16> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = from_f32<bf16>(v[i]);
  return h;
}

void check(bool transposed_b) {
  const int64_t M = 64, N = 96, K = 64, Kp = K + 32, lda = 3 * K + 8, n0 = 32, Nb = n0 + N;  // B packed for Kp rows
  const float alpha = 0.125f;
  const auto a = rounded(test::randn(size_t(M * lda), 61)), b = rounded(test::randn(size_t(Nb * Kp), 62));
  // b as bᵀ: Nb rows of Kp (row stride Kp); as B: Kp rows of Nb (row stride Nb).
  auto B = [&](int64_t k, int64_t n) { return to_f32(transposed_b ? b[size_t(n * Kp + k)] : b[size_t(k * Nb + n)]); };
  std::vector<bf16> packed(cpu::amx_packed_elems(Kp, Nb));
  if (transposed_b)
    cpu::amx_pack_bt(packed.data(), b.data(), Kp, Nb, Kp);
  else
    cpu::amx_pack_b(packed.data(), b.data(), Nb, Kp, Nb);
  const int64_t ldc = N + 4;
  std::vector<float> c(size_t(M * ldc), -7.0f), ref(size_t(M * N)), got(size_t(M * N));
  cpu::amx_gemm(M, N, K, alpha, a.data(), lda, packed.data(), Kp, n0, c.data(), ldc);
  double mag = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(to_f32(a[size_t(m * lda + k)])) * B(k, n0 + n);
      ref[size_t(m * N + n)] = float(alpha * s);
      got[size_t(m * N + n)] = c[size_t(m * ldc + n)];
      mag = std::max(mag, std::fabs(alpha * s));
    }
  test::expect_close(got.data(), ref.data(), got.size(), 1e-5 * mag, 1e-5, transposed_b ? "A·bᵀ" : "A·B");
  for (int64_t m = 0; m < M; ++m)  // the padding between rows of C untouched
    for (int64_t n = N; n < ldc; ++n) ASSERT_EQ(c[size_t(m * ldc + n)], -7.0f);
}

TEST(GemmAmx, PackedFromRowsMatchesDouble) {
  if (!cpu::amx_ready()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or the OS did not grant the tile data)";
  check(true);
}

TEST(GemmAmx, PackedFromColumnsMatchesDouble) {
  if (!cpu::amx_ready()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or the OS did not grant the tile data)";
  check(false);
}

}  // namespace
}  // namespace strata
