// The ops a low-rank adapter runs on beside a frozen weight: column blocks of a fused
// projection (add_columns, take_columns) and a matmul backward without a weight gradient;
// then one adapted linear layer y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ on q of a fused q|k|v, composed from
// the ops, against the formula in double, forward and backward.
#include <gtest/gtest.h>

#include <vector>

#include "core/dtype.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "test_util.h"

namespace strata {
namespace {

using test::randn;

TEST(LoraOps, ColumnBlocksAddAndTakeTheirColumns) {
  cpu::CpuBackend be({size_t(16) << 20, 0});
  const int64_t N = 5, W = 12, w = 4, first = 6;
  const auto y0 = randn(size_t(N * W), 1), x0 = randn(size_t(N * w), 2);
  std::vector<float> y = y0, x = x0;
  be.add_columns({y.data(), DType::f32, {N, W}}, {x.data(), DType::f32, {N, w}}, first, 0.5f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < W; ++c) {
      const bool in = c >= first && c < first + w;
      const float want =
          in ? std::fma(0.5f, x0[size_t(n * w + c - first)], y0[size_t(n * W + c)]) : y0[size_t(n * W + c)];
      EXPECT_EQ(y[size_t(n * W + c)], want) << n << " " << c;
    }
  be.take_columns({x.data(), DType::f32, {N, w}}, {const_cast<float*>(y0.data()), DType::f32, {N, W}}, first, 2.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < w; ++j) EXPECT_EQ(x[size_t(n * w + j)], 2.0f * y0[size_t(n * W + first + j)]);
  // bf16: the f32 result rounded once.
  std::vector<bf16> yh(y0.size()), xh(x0.size());
  for (size_t i = 0; i < yh.size(); ++i) yh[i] = from_f32<bf16>(y0[i]);
  for (size_t i = 0; i < xh.size(); ++i) xh[i] = from_f32<bf16>(x0[i]);
  std::vector<bf16> ywant = yh;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < w; ++j) {
      bf16& o = ywant[size_t(n * W + first + j)];
      o = from_f32<bf16>(std::fma(0.5f, to_f32(xh[size_t(n * w + j)]), to_f32(o)));
    }
  be.add_columns({yh.data(), DType::bf16, {N, W}}, {xh.data(), DType::bf16, {N, w}}, first, 0.5f);
  for (size_t i = 0; i < yh.size(); ++i) EXPECT_EQ(to_f32(yh[i]), to_f32(ywant[i])) << i;
  const std::string msg = test::error_of([&] {
    be.add_columns({y.data(), DType::f32, {N, W}}, {x.data(), DType::f32, {N, w}}, W - 2, 1.0f);
  });
  EXPECT_NE(msg.find("add_columns: columns [10, +4) of"), std::string::npos) << msg;
}

// A frozen weight's backward: the same dinp as with a gradient, no dweight (and the bf16
// path that splits an f32 dout, as the head's cross-entropy gives it, takes the panels).
TEST(LoraOps, AFrozenWeightsBackwardGivesDinpAlone) {
  cpu::CpuBackend be({size_t(64) << 20, 0});
  const int64_t N = 33, C = 40, OC = 24;
  for (DType t : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    auto x = randn(size_t(N * C), 3), wt = randn(size_t(OC * C), 4), dy = randn(size_t(N * OC), 5);
    std::vector<bf16> xh(x.size()), wh(wt.size());
    for (size_t i = 0; i < x.size(); ++i) xh[i] = from_f32<bf16>(x[i]), x[i] = to_f32(xh[i]);
    for (size_t i = 0; i < wt.size(); ++i) wh[i] = from_f32<bf16>(wt[i]), wt[i] = to_f32(wh[i]);
    const TensorView xv = t == DType::f32 ? TensorView{x.data(), t, {N, C}} : TensorView{xh.data(), t, {N, C}};
    const TensorView wv = t == DType::f32 ? TensorView{wt.data(), t, {OC, C}} : TensorView{wh.data(), t, {OC, C}};
    std::vector<float> dx(size_t(N * C)), dx_frozen(dx.size()), dw(size_t(OC * C), 0.0f);
    be.matmul_backward({dx.data(), DType::f32, {N, C}}, {dw.data(), DType::f32, {OC, C}}, {},
                       {dy.data(), DType::f32, {N, OC}}, xv, wv);
    be.matmul_backward({dx_frozen.data(), DType::f32, {N, C}}, {}, {}, {dy.data(), DType::f32, {N, OC}}, xv, wv);
    std::vector<double> want(dx.size(), 0.0);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t o = 0; o < OC; ++o)
          want[size_t(n * C + c)] += double(dy[size_t(n * OC + o)]) * wt[size_t(o * C + c)];
    std::vector<float> wantf(want.begin(), want.end());
    test::expect_close(dx_frozen.data(), wantf.data(), dx.size(), 1e-4, 1e-4, "frozen dinp");
    test::expect_close(dx_frozen.data(), dx.data(), dx.size(), 1e-4, 1e-4, "frozen dinp against the trained one's");
  }
}

// y = x·Wᵀ, and on its q columns [0, nq) s·(x·Aᵀ)·Bᵀ: forward with matmul and add_columns;
// backward dB = s·dy_qᵀ·h, dA = (s·dy_q·B)ᵀ·x, dx = dy·W + (s·dy_q·B)·A with take_columns and
// matmul_backward (W frozen), against the same sums in double.
TEST(LoraOps, AnAdaptedFusedProjectionMatchesItsFormula) {
  cpu::CpuBackend be({size_t(64) << 20, 0});
  const int64_t N = 7, C = 16, Wf = 24, nq = 8, r = 3;
  const float s = 2.0f / float(r);
  const auto x = randn(size_t(N * C), 6), w = randn(size_t(Wf * C), 7), a = randn(size_t(r * C), 8),
             b = randn(size_t(nq * r), 9), dy = randn(size_t(N * Wf), 10);
  auto v = [](const std::vector<float>& d, int64_t rows, int64_t cols) {
    return TensorView{const_cast<float*>(d.data()), DType::f32, {rows, cols}};
  };
  std::vector<float> y(size_t(N * Wf)), h(size_t(N * r)), lo(size_t(N * nq));
  be.matmul_forward(v(y, N, Wf), v(x, N, C), v(w, Wf, C), {});
  be.matmul_forward(v(h, N, r), v(x, N, C), v(a, r, C), {});
  be.matmul_forward(v(lo, N, nq), v(h, N, r), v(b, nq, r), {});
  be.add_columns(v(y, N, Wf), v(lo, N, nq), 0, s);
  std::vector<float> dlo(lo.size()), dh(h.size()), dx(x.size()), dxl(x.size()), da(a.size(), 0.0f), db(b.size(), 0.0f);
  be.take_columns(v(dlo, N, nq), v(dy, N, Wf), 0, s);
  be.matmul_backward(v(dh, N, r), v(db, nq, r), {}, v(dlo, N, nq), v(h, N, r), v(b, nq, r));
  be.matmul_backward(v(dxl, N, C), v(da, r, C), {}, v(dh, N, r), v(x, N, C), v(a, r, C));
  be.matmul_backward(v(dx, N, C), {}, {}, v(dy, N, Wf), v(x, N, C), v(w, Wf, C));
  be.residual_forward(v(dx, N, C), v(dx, N, C), v(dxl, N, C));

  std::vector<double> yr(y.size()), hr(h.size()), dhr(h.size()), dxr(x.size()), dar(a.size()), dbr(b.size());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < r; ++k)
      for (int64_t c = 0; c < C; ++c) hr[size_t(n * r + k)] += double(x[size_t(n * C + c)]) * a[size_t(k * C + c)];
    for (int64_t o = 0; o < Wf; ++o) {
      double acc = 0;
      for (int64_t c = 0; c < C; ++c) acc += double(x[size_t(n * C + c)]) * w[size_t(o * C + c)];
      if (o < nq)
        for (int64_t k = 0; k < r; ++k) acc += s * hr[size_t(n * r + k)] * b[size_t(o * r + k)];
      yr[size_t(n * Wf + o)] = acc;
    }
    for (int64_t k = 0; k < r; ++k)
      for (int64_t o = 0; o < nq; ++o)
        dhr[size_t(n * r + k)] += s * double(dy[size_t(n * Wf + o)]) * b[size_t(o * r + k)];
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t o = 0; o < Wf; ++o) acc += double(dy[size_t(n * Wf + o)]) * w[size_t(o * C + c)];
      for (int64_t k = 0; k < r; ++k) acc += dhr[size_t(n * r + k)] * a[size_t(k * C + c)];
      dxr[size_t(n * C + c)] = acc;
    }
  }
  for (int64_t k = 0; k < r; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t n = 0; n < N; ++n) dar[size_t(k * C + c)] += dhr[size_t(n * r + k)] * x[size_t(n * C + c)];
  for (int64_t o = 0; o < nq; ++o)
    for (int64_t k = 0; k < r; ++k)
      for (int64_t n = 0; n < N; ++n)
        dbr[size_t(o * r + k)] += s * double(dy[size_t(n * Wf + o)]) * hr[size_t(n * r + k)];
  auto f = [](const std::vector<double>& d) { return std::vector<float>(d.begin(), d.end()); };
  test::expect_close(y.data(), f(yr).data(), y.size(), 1e-4, 1e-4, "y");
  test::expect_close(dx.data(), f(dxr).data(), dx.size(), 1e-4, 1e-4, "dx");
  test::expect_close(da.data(), f(dar).data(), da.size(), 1e-4, 1e-4, "dA");
  test::expect_close(db.data(), f(dbr).data(), db.size(), 1e-4, 1e-4, "dB");
}

}  // namespace
}  // namespace strata
