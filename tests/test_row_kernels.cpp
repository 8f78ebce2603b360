// The norms', the loss's and the activations' row kernels (cpu/row_kernels.h) on every
// ISA this CPU has, against double references: LayerNorm and RMSNorm forward and backward in
// f32, bf16 and f16 at widths that leave every tail length, the softmax cross-entropy row, and
// the GELU and SwiGLU. The AVX-512 set
// is skipped (with the reason) on a CPU without it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "cpu/row_kernels.h"
#include "test_util.h"

namespace strata {
namespace {

using cpu::OpsIsa;
using test::randn;

template <typename T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = from_f32<T>(v[i]);
  return r;
}
template <typename T>
std::vector<float> widen(const std::vector<T>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = to_f32(v[i]);
  return r;
}

class RowKernels : public ::testing::TestWithParam<OpsIsa> {
 protected:
  void SetUp() override {
    if (!cpu::ops_isa_supported(GetParam()))
      GTEST_SKIP() << "this CPU has no " << cpu::ops_isa_name(GetParam()) << ": that set never runs here";
  }
  template <typename T>
  void norms(double tol);
  template <typename T>
  void activations(double tol);
};

// Tolerance: one rounding of the output type (f32: accumulated f32 error).
template <typename T>
void RowKernels::norms(double tol) {
  const auto& k = cpu::norm_rows<T>(GetParam());
  for (int64_t C : {1, 7, 8, 15, 16, 17, 37, 768}) {
    SCOPED_TRACE("C=" + std::to_string(C));
    // Inputs rounded to T, so the double reference sees the kernel's values.
    const auto x = as<T>(randn(size_t(C), 1)), w = as<T>(randn(size_t(C), 2)), b = as<T>(randn(size_t(C), 3)),
               dy = as<T>(randn(size_t(C), 4)), dx0 = as<T>(randn(size_t(C), 5));
    const auto xf = widen(x), wf = widen(w), bf = widen(b), dyf = widen(dy), dx0f = widen(dx0);
    // LayerNorm forward and backward.
    double m = 0, v = 0;
    for (float e : xf) m += e;
    m /= double(C);
    for (float e : xf) v += (e - m) * (e - m);
    const double r = 1.0 / std::sqrt(v / double(C) + 1e-5);
    std::vector<float> ref(static_cast<size_t>(C)), ref_dw(static_cast<size_t>(C)), ref_db(static_cast<size_t>(C)),
        ref_dx(static_cast<size_t>(C));
    double dm = 0, dnm = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (xf[c] - m) * r;
      ref[c] = float(norm * wf[c] + bf[c]);
      dm += wf[c] * dyf[c];
      dnm += wf[c] * dyf[c] * norm;
    }
    dm /= double(C), dnm /= double(C);
    for (int64_t c = 0; c < C; ++c) {
      const double norm = (xf[c] - m) * r;
      ref_db[c] = 0.5f + dyf[c];
      ref_dw[c] = float(0.25 + norm * dyf[c]);
      ref_dx[c] = float(dx0f[c] + (wf[c] * dyf[c] - dm - norm * dnm) * r);
    }
    std::vector<T> y(static_cast<size_t>(C)), dx = dx0;
    float mean = 0, rstd = 0;
    k.layernorm_forward(y.data(), x.data(), w.data(), b.data(), C, &mean, &rstd);
    test::expect_close(widen(y).data(), ref.data(), ref.size(), tol, tol, "layernorm forward");
    EXPECT_NEAR(mean, m, 1e-5);
    EXPECT_NEAR(rstd, r, 1e-4 * r);
    std::vector<float> pdw(size_t(C), 0.25f), pdb(size_t(C), 0.5f);
    k.layernorm_backward(dx.data(), pdw.data(), pdb.data(), dy.data(), x.data(), w.data(), mean, rstd, C);
    test::expect_close(widen(dx).data(), ref_dx.data(), ref.size(), tol, tol, "layernorm dx");
    test::expect_close(pdw.data(), ref_dw.data(), ref.size(), 1e-5, 1e-5, "layernorm dw");
    test::expect_close(pdb.data(), ref_db.data(), ref.size(), 1e-6, 1e-6, "layernorm db");
    // RMSNorm forward and backward, accumulating and in place (dx is dy), with the scale w and
    // with Gemma's 1 + w.
    for (const float wofs : {0.0f, 1.0f}) {
      SCOPED_TRACE("weight offset " + std::to_string(wofs));
      double ss = 0;
      for (float e : xf) ss += double(e) * e;
      const double rr = 1.0 / std::sqrt(ss / double(C) + 1e-6);
      double dot = 0;
      for (int64_t c = 0; c < C; ++c) {
        ref[c] = float(xf[c] * rr * (wf[c] + wofs));
        dot += (wf[c] + wofs) * dyf[c] * xf[c] * rr;
      }
      dot /= double(C);
      for (int64_t c = 0; c < C; ++c) {
        const double norm = xf[c] * rr, d = rr * ((wf[c] + wofs) * dyf[c] - norm * dot);
        ref_dw[c] = float(0.25 + norm * dyf[c]);
        ref_dx[c] = float(dx0f[c] + d);
        ref_db[c] = float(d);  // the in-place result
      }
      float rs = 0;
      k.rmsnorm_forward(y.data(), x.data(), w.data(), wofs, C, 1e-6f, &rs);
      test::expect_close(widen(y).data(), ref.data(), ref.size(), tol, tol, "rmsnorm forward");
      EXPECT_NEAR(rs, rr, 1e-4 * rr);
      dx = dx0;
      std::fill(pdw.begin(), pdw.end(), 0.25f);
      k.rmsnorm_backward(dx.data(), dy.data(), x.data(), w.data(), wofs, rs, C, pdw.data(), true);
      test::expect_close(widen(dx).data(), ref_dx.data(), ref.size(), tol, tol, "rmsnorm dx (accumulated)");
      test::expect_close(pdw.data(), ref_dw.data(), ref.size(), 1e-5, 1e-5, "rmsnorm dw");
      std::vector<T> g = dy;
      k.rmsnorm_backward(g.data(), g.data(), x.data(), w.data(), wofs, rs, C, pdw.data(), false);
      test::expect_close(widen(g).data(), ref_db.data(), ref.size(), tol, tol, "rmsnorm dx (in place)");
    }
  }
}

TEST_P(RowKernels, NormsF32) { norms<float>(2e-5); }
TEST_P(RowKernels, NormsBf16) { norms<bf16>(1.0 / 128); }
TEST_P(RowKernels, NormsF16) { norms<f16>(1.0 / 1024); }

// The GELU and SwiGLU against double references (tolerance: one rounding of T), at lengths
// that leave every tail; and the AVX2 set's bits on every ISA, so a run's activations do not
// depend on which set the CPU takes.
template <typename T>
void RowKernels::activations(double tol) {
  const auto& k = cpu::act_rows<T>(GetParam());
  const auto& avx2 = cpu::act_rows<T>(OpsIsa::avx2);
  for (int64_t n : {1, 7, 8, 15, 16, 17, 37, 768}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const size_t N = size_t(n);
    const auto x = as<T>(randn(N, 11, 3.0f)), u = as<T>(randn(N, 12)), dy = as<T>(randn(N, 13));
    const auto xf = widen(x), uf = widen(u), dyf = widen(dy);
    std::vector<float> gelu(N), dgelu(N), silu(N), dg(N), du(N);
    for (size_t i = 0; i < N; ++i) {
      const double v = xf[i], c = 0.7978845608028654, a = 0.044715, th = std::tanh(c * (v + a * v * v * v));
      gelu[i] = float(0.5 * v * (1 + th));
      dgelu[i] = float((0.5 * (1 + th) + 0.5 * v * (1 - th * th) * c * (1 + 3 * a * v * v)) * dyf[i]);
      const double s = 1 / (1 + std::exp(-v));
      silu[i] = float(v * s * uf[i]);
      dg[i] = float(dyf[i] * uf[i] * s * (1 + v * (1 - s)));
      du[i] = float(dyf[i] * v * s);
    }
    std::vector<T> y(N), y2(N), d1(N), d2(N), d1b(N), d2b(N);
    k.gelu_forward(y.data(), x.data(), n);
    test::expect_close(widen(y).data(), gelu.data(), N, tol, tol, "gelu");
    avx2.gelu_forward(y2.data(), x.data(), n);
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), N * sizeof(T)), 0) << "gelu: not the AVX2 set's bits";
    d1 = dy;  // in place: dx is dy
    k.gelu_backward(d1.data(), x.data(), d1.data(), n);
    test::expect_close(widen(d1).data(), dgelu.data(), N, tol, tol, "gelu backward");
    avx2.gelu_backward(d2.data(), x.data(), dy.data(), n);
    EXPECT_EQ(std::memcmp(d1.data(), d2.data(), N * sizeof(T)), 0) << "gelu backward: not the AVX2 set's bits";
    k.swiglu_forward(y.data(), x.data(), u.data(), n);
    test::expect_close(widen(y).data(), silu.data(), N, tol, tol, "swiglu");
    avx2.swiglu_forward(y2.data(), x.data(), u.data(), n);
    EXPECT_EQ(std::memcmp(y.data(), y2.data(), N * sizeof(T)), 0) << "swiglu: not the AVX2 set's bits";
    k.swiglu_backward(d1.data(), d2.data(), x.data(), u.data(), dy.data(), n);
    test::expect_close(widen(d1).data(), dg.data(), N, tol, tol, "swiglu dgate");
    test::expect_close(widen(d2).data(), du.data(), N, tol, tol, "swiglu dup");
    avx2.swiglu_backward(d1b.data(), d2b.data(), x.data(), u.data(), dy.data(), n);
    EXPECT_EQ(std::memcmp(d1.data(), d1b.data(), N * sizeof(T)), 0) << "swiglu dgate: not the AVX2 set's bits";
    EXPECT_EQ(std::memcmp(d2.data(), d2b.data(), N * sizeof(T)), 0) << "swiglu dup: not the AVX2 set's bits";
  }
}

TEST_P(RowKernels, ActivationsF32) { activations<float>(2e-5); }  // tanh as 1 − 2/(e + 1)
TEST_P(RowKernels, ActivationsBf16) { activations<bf16>(1.0 / 128); }
TEST_P(RowKernels, ActivationsF16) { activations<f16>(1.0 / 1024); }

TEST_P(RowKernels, SoftmaxCrossEntropyRow) {
  const auto ce = cpu::softmax_ce_row(GetParam());
  for (int64_t V : {1, 5, 16, 33, 50257}) {
    SCOPED_TRACE("V=" + std::to_string(V));
    auto row = randn(size_t(V), 7, 3.0f);
    const int32_t t = int32_t(V / 3);
    double mx = -1e300, sum = 0;
    for (float e : row) mx = std::max(mx, double(e));
    for (float e : row) sum += std::exp(e - mx);
    const double lse = mx + std::log(sum), dloss = 0.5;
    std::vector<float> ref(row.size());
    for (int64_t v = 0; v < V; ++v) ref[v] = float(dloss * std::exp(row[v] - lse) - (v == t ? dloss : 0.0));
    const double want = lse - row[size_t(t)];
    const double loss = ce(row.data(), V, t, float(dloss));
    EXPECT_NEAR(loss, want, 1e-5 * std::max(1.0, want));
    test::expect_close(row.data(), ref.data(), ref.size(), 1e-7, 1e-5, "softmax-ce gradient");
  }
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, RowKernels, ::testing::Values(OpsIsa::avx2, OpsIsa::avx512),
                         [](const auto& info) { return std::string(cpu::ops_isa_name(info.param)); });

}  // namespace
}  // namespace strata
