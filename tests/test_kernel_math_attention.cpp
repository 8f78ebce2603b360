// The CUDA attention kernels' math on the host: kernels/math/attention_host.h runs the
// kernels' tiles and attention_math.h calls serially, and is held here to the CPU
// backend's cpu::attention_forward / cpu::attention_backward on random f32 inputs. CI has
// no GPU, so this is where a wrong online-softmax rescale, mask or gradient term shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "cpu/cpu_backend.h"
#include "cpu/ops.h"
#include "cpu/workspace.h"
#include "kernels/math/attention_host.h"
#include "kernels/math/attention_math.h"
#include "kernels/math/segment_math.h"
#include "test_util.h"

namespace strata {
namespace {

namespace km = kernel_math;

using test::randn;

// f32 against the CPU reference: both accumulate in f32 in different orders (tiles and an
// online rescale here, whole-row GEMMs there), so elements agree to a few ulps of the
// row's magnitude; the absolute floor covers sums that cancel to near zero. A score s is
// rounded to about |s|·2^-24 and exp(s - lse) carries that as a relative error, so inputs
// scaled by x (scores by x²) get x² times the tolerance.
constexpr double kRtol = 1e-5, kAtol = 2e-6;

struct Shape {
  int B, T, NH, hd;
  float input_scale;  // larger inputs give sharper softmaxes (the running max moves more)
};

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  return os << "B" << s.B << "_T" << s.T << "_NH" << s.NH << "_hd" << s.hd << "_x" << s.input_scale;
}

// The CPU reference's forward and backward for one shape, plus its inputs.
struct Reference {
  std::vector<float> qkv, dout, out, lse, dqkv;
};

Reference run_cpu(const Shape& s, uint64_t seed, const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                  std::span<const int32_t> positions = {}) {
  const int C = s.NH * s.hd;
  Reference r;
  r.qkv = randn(size_t(s.B) * s.T * 3 * C, seed, s.input_scale);
  r.dout = randn(size_t(s.B) * s.T * C, seed + 1);
  r.out.assign(size_t(s.B) * s.T * C, 0.0f);
  r.lse.assign(size_t(s.B) * s.NH * s.T, 0.0f);
  r.dqkv.assign(r.qkv.size(), 0.0f);
  // The ops' scratch is host-addressable backend memory (never opaque).
  cpu::CpuBackend be({size_t(256) << 20, 0, /*opaque=*/false});
  cpu::Workspace ws([&](size_t n, const std::string& tag) { return be.allocate(n, tag); });
  TensorView qv{r.qkv.data(), DType::f32, {s.B, s.T, 3 * C}}, ov{r.out.data(), DType::f32, {s.B, s.T, C}},
      lv{r.lse.data(), DType::f32, {s.B, s.NH, s.T}}, dov{r.dout.data(), DType::f32, {s.B, s.T, C}},
      dqv{r.dqkv.data(), DType::f32, {s.B, s.T, 3 * C}};
  cpu::attention_forward(ov, lv, qv, s.NH, ws, drop, spec, positions);
  cpu::attention_backward(dqv, dov, qv, ov, lv, s.NH, ws, drop, spec, positions);
  return r;
}

class AttentionHost : public ::testing::TestWithParam<Shape> {};

// Packed rows' positions: records of the given lengths in turn, each row starting afresh.
std::vector<int32_t> packed_positions(int B, int T, const std::vector<int>& lengths) {
  std::vector<int32_t> pos(size_t(B) * T);
  size_t k = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0, p = 0; t < T; ++t, ++p) {
      if (p == lengths[k % lengths.size()]) p = 0, ++k;
      pos[size_t(b) * T + t] = p;
    }
  return pos;
}

void expect_host_matches_cpu(const Shape& s, const DropoutSpec& drop, const AttentionSpec& spec = {},
                             const std::vector<int32_t>& positions = {}) {
  const Reference ref = run_cpu(s, 1000 + uint64_t(s.T) * 7 + uint64_t(s.hd), drop, spec, positions);
  // The kernels' device arrays, here on the host: positions and each row's record end.
  std::vector<int32_t> last(positions.size());
  if (!positions.empty()) km::segment_last_rows(last.data(), positions.data(), s.B, s.T);
  const km::AttnRecords rec{positions.empty() ? nullptr : positions.data(), positions.empty() ? nullptr : last.data()};
  const size_t C = size_t(s.NH) * s.hd;
  const double sharp = double(s.input_scale) * s.input_scale, rtol = kRtol * sharp, atol = kAtol * sharp;

  std::vector<float> out(size_t(s.B) * s.T * C), lse(size_t(s.B) * s.NH * s.T);
  km::attention_forward_host(out.data(), lse.data(), ref.qkv.data(), s.B, s.T, s.NH, s.hd, drop, spec, rec);
  test::expect_close(out.data(), ref.out.data(), out.size(), atol, rtol, "out");
  test::expect_close(lse.data(), ref.lse.data(), lse.size(), atol, rtol, "lse");

  // dqkv is overwritten: start from NaN so any element the drivers skip fails. The
  // backward reads the reference's out and lse so that only its own error is measured.
  std::vector<float> dqkv(ref.qkv.size(), std::numeric_limits<float>::quiet_NaN());
  km::attention_backward_host(dqkv.data(), ref.dout.data(), ref.qkv.data(), ref.out.data(), ref.lse.data(), s.B, s.T,
                              s.NH, s.hd, drop, spec, rec);
  // dS = P·(dP - D) cancels, so gradients get a floor relative to their largest element.
  double peak = 0;
  for (float g : ref.dqkv) peak = std::max(peak, double(std::fabs(g)));
  test::expect_close(dqkv.data(), ref.dqkv.data(), dqkv.size(), atol + 1e-6 * sharp * peak, rtol, "dqkv");
}

TEST_P(AttentionHost, ForwardAndBackwardMatchCpuReference) { expect_host_matches_cpu(GetParam(), {}); }

// Attention dropout: the kernels' drivers regenerate the CPU op's masks (the same hash of
// sample, head, query and key) in their tiled order, forward and backward.
TEST_P(AttentionHost, WithDropoutMatchCpuReference) {
  expect_host_matches_cpu(GetParam(), make_dropout(0.25f, 42, 7, /*first_row=*/1000));
}

// A sliding window shorter than the sequence (query i sees keys i-W < j ≤ i): windows
// inside one tile, across a tile boundary and of one key, with and without dropout.
TEST_P(AttentionHost, WithSlidingWindowMatchCpuReference) {
  const Shape& s = GetParam();
  for (int window : {1, 5, 33})
    if (window < s.T) {
      SCOPED_TRACE("window " + std::to_string(window));
      expect_host_matches_cpu(s, {}, {window});
      expect_host_matches_cpu(s, make_dropout(0.25f, 42, 7, /*first_row=*/1000), {window});
    }
}

// Gemma's scores: another scale (query_pre_attn_scalar^-1/2) and a soft-cap (cap·tanh(s/cap)),
// with a window and dropout.
TEST_P(AttentionHost, WithScaleAndSoftCapMatchCpuReference) {
  const Shape& s = GetParam();
  expect_host_matches_cpu(s, {}, {0, 0.3f, 0.0f});
  expect_host_matches_cpu(s, {}, {0, 0.0f, 1.5f});
  expect_host_matches_cpu(s, make_dropout(0.25f, 42, 7, /*first_row=*/1000), {7, 0.2f, 2.0f});
}

// Packed rows: records of 1, 5, 33 and 7 tokens (inside a tile, across tile boundaries),
// each attending only to itself, with a window and with dropout (indexed by the row's
// positions, not the record's).
TEST_P(AttentionHost, WithPackedRecordsMatchCpuReference) {
  const Shape& s = GetParam();
  const std::vector<int32_t> pos = packed_positions(s.B, s.T, {1, 5, 33, 7});
  expect_host_matches_cpu(s, {}, {}, pos);
  expect_host_matches_cpu(s, make_dropout(0.25f, 42, 7, /*first_row=*/1000), {}, pos);
  expect_host_matches_cpu(s, {}, {3, 0.0f, 1.5f}, pos);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionHost,
                         ::testing::Values(Shape{1, 1, 1, 16, 1.0f},    // a single token: P = 1
                                           Shape{2, 1, 3, 64, 1.0f},    // T = 1 over batches and heads
                                           Shape{1, 32, 2, 16, 1.0f},   // exactly one tile
                                           Shape{2, 37, 2, 16, 1.0f},   // one tile and a ragged one
                                           Shape{1, 70, 3, 80, 1.0f},   // hd not a power of two
                                           Shape{2, 65, 2, 64, 1.0f},   // three tiles, the last of one key
                                           Shape{1, 100, 1, 80, 2.0f},  // sharp softmax: the max moves
                                           Shape{1, 129, 2, 20, 3.0f},  // hd not a multiple of 4
                                           Shape{1, 50, 1, 7, 1.0f}),   // odd hd below one lane chunk
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           std::ostringstream os;
                           os << info.param;
                           std::string name = os.str();
                           for (auto& c : name)
                             if (c == '.') c = 'p';
                           return name;
                         });

// The forward's two outputs describe one distribution: with the saved lse, the backward's
// P_ij = exp(s_ij - lse_i) sums to 1 over j ≤ i and reproduces out_i = Σ_j P_ij v_j.
TEST(AttentionHost, ForwardLseAndOutputAgree) {
  const int B = 2, T = 45, NH = 2, hd = 24, C = NH * hd;
  const auto qkv = randn(size_t(B) * T * 3 * C, 77, 2.0f);
  std::vector<float> out(size_t(B) * T * C), lse(size_t(B) * NH * T);
  km::attention_forward_host(out.data(), lse.data(), qkv.data(), B, T, NH, hd);
  const double scale = 1.0 / std::sqrt(double(hd));
  double worst_sum = 0, worst_out = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const float* q = &qkv[size_t((b * T + i) * 3 * C + h * hd)];
        const double L = lse[size_t((b * NH + h) * T + i)];
        std::vector<double> o(size_t(hd), 0.0);
        double psum = 0;
        for (int j = 0; j <= i; ++j) {
          const float* k = &qkv[size_t((b * T + j) * 3 * C + C + h * hd)];
          const float* v = k + C;
          double sc = 0;
          for (int d = 0; d < hd; ++d) sc += double(q[d]) * k[d];
          const double p = std::exp(sc * scale - L);
          psum += p;
          for (int d = 0; d < hd; ++d) o[size_t(d)] += p * v[d];
        }
        worst_sum = std::max(worst_sum, std::fabs(psum - 1.0));
        for (int d = 0; d < hd; ++d)
          worst_out = std::max(worst_out, std::fabs(o[size_t(d)] - out[size_t((b * T + i) * C + h * hd + d)]));
      }
  // Inputs ×2: scores ×4, so 4× the f32 tolerance (see kRtol).
  EXPECT_LT(worst_sum, 4e-5) << "Σ_j exp(s_ij - lse_i) is not 1";
  EXPECT_LT(worst_out, 4e-5) << "out_i differs from Σ_j exp(s_ij - lse_i) v_j";
}

// The online softmax state: a fully masked tile changes nothing, the first tile's factor
// is 0 (the accumulator is empty), and folding tiles in gives the same lse as one pass.
TEST(AttentionMath, OnlineSoftmaxState) {
  km::SoftmaxState st = km::softmax_init();
  EXPECT_EQ(km::softmax_rescale(st, -INFINITY), 1.0f);
  EXPECT_EQ(st.l, 0.0f);
  EXPECT_EQ(km::softmax_rescale(st, 2.0f), 0.0f);  // scales the empty accumulator
  km::softmax_accumulate(st, km::softmax_weight(2.0f, st) + km::softmax_weight(1.0f, st));
  const km::SoftmaxState before = st;
  EXPECT_EQ(km::softmax_rescale(st, -INFINITY), 1.0f);
  EXPECT_EQ(km::softmax_weight(-INFINITY, st), 0.0f);
  EXPECT_EQ(st.m, before.m);
  EXPECT_EQ(st.l, before.l);
  const float alpha = km::softmax_rescale(st, 5.0f);  // a later, larger score
  EXPECT_FLOAT_EQ(alpha, std::exp(-3.0f));
  km::softmax_accumulate(st, km::softmax_weight(5.0f, st));
  const double expect = std::log(std::exp(2.0) + std::exp(1.0) + std::exp(5.0));
  EXPECT_NEAR(km::softmax_lse(st), expect, 1e-6);
  EXPECT_FLOAT_EQ(km::attn_masked_score(3.0f, km::attn_visible(4, 5, 0)), -INFINITY);
  EXPECT_FLOAT_EQ(km::attn_masked_score(3.0f, km::attn_visible(5, 5, 0)), 3.0f);
  // A window of 3: query 5 sees keys 3, 4 and 5.
  EXPECT_FALSE(km::attn_visible(5, 2, 3));
  EXPECT_TRUE(km::attn_visible(5, 3, 3));
  EXPECT_TRUE(km::attn_visible(5, 5, 3));
  EXPECT_TRUE(km::attn_visible(5, 0, 0));
  // In a packed row only the query's own record: query 5 of a record that began at 4.
  EXPECT_FALSE(km::attn_visible(5, 3, 0, 4));
  EXPECT_TRUE(km::attn_visible(5, 4, 0, 4));
  // The records' last rows: records [0, 2), [2, 5), [5, 6) in a row of 6.
  const int32_t pos[6] = {0, 1, 0, 1, 2, 0};
  int32_t last[6];
  km::segment_last_rows(last, pos, 1, 6);
  EXPECT_EQ(std::vector<int32_t>(last, last + 6), (std::vector<int32_t>{1, 1, 4, 4, 4, 5}));
  // The tiles the kernels may skip hold no visible pair.
  for (int window : {1, 3, 32, 40})
    for (int i = 0; i < 200; ++i) {
      for (int j = 0; j < km::attn_first_key_tile(i, window) * km::kAttnTile; ++j)
        EXPECT_FALSE(km::attn_visible(i, j, window)) << i << " " << j;
      for (int q = (km::attn_last_query_tile(i, window, 200) + 1) * km::kAttnTile; q < 200; ++q)
        EXPECT_FALSE(km::attn_visible(q, i, window)) << q << " " << i;
    }
  float p = 1, ds = 1;
  km::attn_grad_pair(0.5f, 2.0f, 0.5f, 1.5f, false, 1.0f, 0.0f, &p, &ds);
  EXPECT_EQ(p, 0.0f);
  EXPECT_EQ(ds, 0.0f);
  km::attn_grad_pair(0.5f, 2.0f, 0.5f, 1.5f, true, 1.0f, 0.0f, &p, &ds);
  EXPECT_EQ(p, 1.0f);
  EXPECT_FLOAT_EQ(ds, 0.5f);
}

// The launch shapes: every hd up to the maximum gets enough lane chunks and a float4 pad.
TEST(AttentionMath, LaunchShapes) {
  for (int hd = 1; hd <= km::kAttnMaxHeadDim; ++hd) {
    const int chunks = km::attn_lane_chunks(hd);
    EXPECT_GE(chunks * km::kAttnTile, hd) << hd;
    EXPECT_LE(chunks, 8) << hd;
    EXPECT_EQ(km::attn_padded_hd(hd) % 4, 0) << hd;
    EXPECT_GE(km::attn_padded_hd(hd), hd) << hd;
    EXPECT_LT(km::attn_padded_hd(hd), hd + 4) << hd;
  }
  EXPECT_EQ(km::attn_lane_chunks(64), 2);
  EXPECT_EQ(km::attn_lane_chunks(80), 4);
  EXPECT_EQ(km::attn_lane_chunks(128), 4);
  EXPECT_EQ(km::attn_lane_chunks(256), 8);
}

}  // namespace
}  // namespace strata
