// The fused CPU Adam: every compiled ISA against the scalar reference (tolerance: 0 ulps —
// the kernels perform the same IEEE operations in the same order), guard words around
// every buffer, non-finite gradients flagged, thread/tile independence, and a 10-step
// trajectory against PyTorch's AdamW and Adam (L2) stored as a fixture.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "host/adam/adam.h"
#include "test_util.h"

namespace strata {
namespace {

using host::AdamHyper;
using host::AdamIsa;
using host::AdamTensors;

constexpr size_t kGuard = 16;
constexpr uint32_t kSentinel = 0xdeadbeef;

// Buffers with guard words before and after, filled from a seed.
struct AdamCase {
  int64_t n;
  DType grad_dtype;
  bool copy_out;
  DType out_dtype;
  std::vector<float> p, m, v;
  std::vector<uint32_t> graw;  // f32 bits or two 16-bit grads per word, with guards
  std::vector<uint16_t> out;

  AdamCase(int64_t n_, DType gd, bool co, DType od, uint64_t seed)
      : n(n_), grad_dtype(gd), copy_out(co), out_dtype(od) {
    NormalRng r(seed, 0);
    auto fill = [&](std::vector<float>& x, float scale, bool positive) {
      x.assign(size_t(n) + 2 * kGuard, std::bit_cast<float>(kSentinel));
      for (int64_t i = 0; i < n; ++i) x[kGuard + size_t(i)] = positive ? std::fabs(scale * r.next()) : scale * r.next();
    };
    fill(p, 1.0f, false), fill(m, 0.01f, false), fill(v, 1e-4f, true);
    std::vector<float> g(static_cast<size_t>(n));
    for (auto& x : g) x = 0.1f * r.next();
    graw.assign(size_t(n) + 2 * kGuard, kSentinel);
    if (n == 0) {
      // nothing to copy (memcpy from a null pointer is undefined even for 0 bytes)
    } else if (gd == DType::f32) {
      std::memcpy(&graw[kGuard], g.data(), size_t(n) * 4);
    } else {
      convert(reinterpret_cast<uint16_t*>(&graw[kGuard]), gd, g.data(), DType::f32, size_t(n));
    }
    out.assign(size_t(n) + 2 * kGuard, 0xbeef);
  }
  AdamTensors tensors() {
    AdamTensors t;
    t.param = &p[kGuard], t.m = &m[kGuard], t.v = &v[kGuard];
    t.grad = &graw[kGuard], t.grad_dtype = grad_dtype;
    t.param_out = copy_out ? &out[kGuard] : nullptr, t.out_dtype = out_dtype;
    t.n = n;
    return t;
  }
  void expect_guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i) {
      for (const auto* x : {&p, &m, &v}) {
        EXPECT_EQ(std::bit_cast<uint32_t>((*x)[i]), kSentinel) << "underrun";
        EXPECT_EQ(std::bit_cast<uint32_t>((*x)[size_t(n) + kGuard + i]), kSentinel) << "overrun";
      }
      EXPECT_EQ(out[i], 0xbeef);
      EXPECT_EQ(out[size_t(n) + kGuard + i], 0xbeef) << "copy-out overrun";
    }
  }
};

class CpuAdamIsa : public ::testing::TestWithParam<AdamIsa> {};

TEST_P(CpuAdamIsa, MatchesScalarBitForBit) {
  const AdamIsa isa = GetParam();
  if (!host::adam_isa_supported(isa))
    GTEST_SKIP() << "this CPU lacks " << host::adam_isa_name(isa) << ": the kernel is compiled but cannot run here";
  {
    for (int64_t n : {0, 1, 15, 22, 1000003})
      for (DType gd : {DType::f32, DType::bf16, DType::f16})
        for (int co = 0; co < 3; ++co)
          for (bool decoupled : {true, false})
            for (bool bc : {true, false}) {
              const DType od = co == 2 ? DType::f16 : DType::bf16;
              AdamCase ref(n, gd, co > 0, od, uint64_t(n) + 1), got(n, gd, co > 0, od, uint64_t(n) + 1);
              AdamHyper h{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, decoupled, bc, 7, 0.5f};
              const bool f1 = host::adam_step(ref.tensors(), h, {AdamIsa::scalar, 1, 1 << 16});
              const bool f2 = host::adam_step(got.tensors(), h, {isa, 0, 4096});
              const std::string what = std::string(host::adam_isa_name(isa)) + " n=" + std::to_string(n) +
                                       " grad=" + std::string(dtype_name(gd)) + " copy=" + std::to_string(co) +
                                       " adamw=" + std::to_string(decoupled) + " bc=" + std::to_string(bc);
              EXPECT_EQ(f1, f2) << what;
              EXPECT_FALSE(f1) << what;
              ASSERT_EQ(std::memcmp(ref.p.data(), got.p.data(), ref.p.size() * 4), 0) << "param " << what;
              ASSERT_EQ(std::memcmp(ref.m.data(), got.m.data(), ref.m.size() * 4), 0) << "m " << what;
              ASSERT_EQ(std::memcmp(ref.v.data(), got.v.data(), ref.v.size() * 4), 0) << "v " << what;
              ASSERT_EQ(ref.out, got.out) << "copy-out " << what;
              got.expect_guards_intact();
              if (co > 0 && n > 0) {  // the copy-out is the RNE rounding of the updated master
                const uint16_t want = od == DType::bf16 ? f32_to_bf16(got.p[kGuard + size_t(n) - 1])
                                                        : f32_to_f16(got.p[kGuard + size_t(n) - 1]);
                EXPECT_EQ(got.out[kGuard + size_t(n) - 1], want) << what;
              }
            }
  }
}

INSTANTIATE_TEST_SUITE_P(VectorIsas, CpuAdamIsa, ::testing::Values(AdamIsa::avx2, AdamIsa::avx512),
                         [](const auto& info) { return std::string(host::adam_isa_name(info.param)); });

TEST(CpuAdam, NonFiniteGradientsAreFlaggedInOnePass) {
  for (AdamIsa isa : {AdamIsa::scalar, AdamIsa::avx2, AdamIsa::avx512}) {
    if (!host::adam_isa_supported(isa)) continue;
    for (int64_t pos : {0, 5, 500, 1002}) {  // vector body and the scalar tail
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        for (DType gd : {DType::f32, DType::bf16, DType::f16}) {
          AdamCase c(1003, gd, false, DType::bf16, 3);
          if (gd == DType::f32) {
            c.graw[kGuard + size_t(pos)] = std::bit_cast<uint32_t>(bad);
          } else {
            auto* h = reinterpret_cast<uint16_t*>(&c.graw[kGuard]);
            h[pos] = gd == DType::bf16 ? f32_to_bf16(bad) : f32_to_f16(bad);
          }
          EXPECT_TRUE(host::adam_step(c.tensors(), {}, {isa, 0, 256}))
              << adam_isa_name(isa) << " " << dtype_name(gd) << " at " << pos << " value " << bad;
        }
      }
    }
    AdamCase ok(1003, DType::f32, false, DType::bf16, 3);
    EXPECT_FALSE(host::adam_step(ok.tensors(), {}, {isa, 0, 256}));
  }
}

TEST(CpuAdam, ResultDoesNotDependOnThreadsOrTiles) {
  AdamCase a(100003, DType::bf16, true, DType::bf16, 9), b(100003, DType::bf16, true, DType::bf16, 9);
  host::adam_step(a.tensors(), {}, {AdamIsa::automatic, 1, 1 << 20});
  host::adam_step(b.tensors(), {}, {AdamIsa::automatic, 2, 1000});
  EXPECT_EQ(a.p, b.p);
  EXPECT_EQ(a.out, b.out);
}

// Out of place (read param/m/v from *_in, write param/m/v) gives the in-place result bit for
// bit on every ISA and leaves the inputs untouched (speculative offloaded steps rely on it).
TEST(CpuAdam, OutOfPlaceEqualsInPlace) {
  for (AdamIsa isa : {AdamIsa::scalar, AdamIsa::avx2, AdamIsa::avx512}) {
    if (!host::adam_isa_supported(isa)) continue;
    AdamCase a(1003, DType::bf16, true, DType::bf16, 5), src(1003, DType::bf16, true, DType::bf16, 5);
    AdamCase dst(1003, DType::bf16, true, DType::bf16, 6);  // different contents, overwritten
    const std::vector<float> p0 = src.p, m0 = src.m, v0 = src.v;
    host::adam_step(a.tensors(), {}, {isa, 0, 256});
    AdamTensors t = dst.tensors();
    t.param_in = &src.p[kGuard], t.m_in = &src.m[kGuard], t.v_in = &src.v[kGuard];
    t.grad = &src.graw[kGuard];
    host::adam_step(t, {}, {isa, 0, 256});
    EXPECT_EQ(dst.p, a.p) << adam_isa_name(isa);
    EXPECT_EQ(dst.m, a.m) << adam_isa_name(isa);
    EXPECT_EQ(dst.v, a.v) << adam_isa_name(isa);
    EXPECT_EQ(dst.out, a.out) << adam_isa_name(isa);
    EXPECT_EQ(src.p, p0);
    EXPECT_EQ(src.m, m0);
    EXPECT_EQ(src.v, v0);
    dst.expect_guards_intact();
  }
}

TEST(CpuAdam, BadArgumentsAreErrors) {
  AdamTensors t;
  t.n = 10;
  EXPECT_THROW(host::adam_step(t, {}), Error);
  EXPECT_THROW(host::parse_adam_isa("sse"), Error);
}

// 10 steps against PyTorch (torch.optim.AdamW and torch.optim.Adam with L2), element-wise.
// Tolerance: |Δ| <= 8 ulp(|ref|) + 1e-7. The formulas differ only in rounding: torch computes
// sqrt(v)/sqrt(bc2) + eps and separate multiplies where Strata uses FMAs.
TEST(CpuAdam, TenStepsMatchPyTorch) {
  std::ifstream f(test::source_path("tests/fixtures/adam_trajectory.bin"), std::ios::binary);
  ASSERT_TRUE(f.good()) << "run tests/tools/make_adam_fixture.py";
  int32_t head[4];
  float hp[5];
  f.read(reinterpret_cast<char*>(head), sizeof head);
  f.read(reinterpret_cast<char*>(hp), sizeof hp);
  ASSERT_EQ(head[0], 0x53544144);
  ASSERT_EQ(head[1], 1);
  const size_t n = size_t(head[2]), steps = size_t(head[3]);
  auto rd = [&](size_t count) {
    std::vector<float> x(count);
    f.read(reinterpret_cast<char*>(x.data()), std::streamsize(count * 4));
    return x;
  };
  const auto p0 = rd(n), grads = rd(steps * n), adamw = rd(steps * n), adam = rd(steps * n);
  ASSERT_TRUE(f.good());
  for (AdamIsa isa : {AdamIsa::scalar, AdamIsa::avx2, AdamIsa::avx512}) {
    if (!host::adam_isa_supported(isa)) continue;
    for (bool decoupled : {true, false}) {
      std::vector<float> p = p0, m(n), v(n);
      const auto& ref = decoupled ? adamw : adam;
      for (size_t s = 0; s < steps; ++s) {
        AdamTensors t;
        t.param = p.data(), t.m = m.data(), t.v = v.data(), t.grad = grads.data() + s * n, t.n = int64_t(n);
        host::adam_step(t, {hp[0], hp[1], hp[2], hp[3], hp[4], decoupled, true, int64_t(s + 1), 1.0f}, {isa, 0, 64});
        for (size_t i = 0; i < n; ++i) {
          const float r = ref[s * n + i];
          const float ulp = std::nextafter(std::fabs(r), INFINITY) - std::fabs(r);
          ASSERT_LE(std::fabs(p[i] - r), 8 * ulp + 1e-7f)
              << adam_isa_name(isa) << (decoupled ? " AdamW" : " Adam-L2") << " step " << s + 1 << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
