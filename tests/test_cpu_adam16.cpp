// The fused CPU Adam on 16-bit states (AdamTensors::m16/v16/param16). Every ISA the
// CPU has against the scalar reference bit for bit, across masters, roundings, gradient and
// copy-out dtypes, non-finite gradients and a vector that crosses a 2^32 index boundary; round-to-nearest equal to
// the f32 update rounded once; stochastic rounding unbiased, reproducible from (seed, step,
// index), and the same whether a shard or the whole array is updated, on one thread or many.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "host/adam/adam.h"

namespace strata {
namespace {

using host::AdamHyper;
using host::AdamIsa;
using host::AdamTensors;

std::vector<uint16_t> bf16_of(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = f32_to_bf16(x[i]);
  return r;
}

std::vector<uint32_t> bits_of(const std::vector<float>& x) {  // NaN-safe bitwise comparison
  std::vector<uint32_t> r(x.size());
  std::memcpy(r.data(), x.data(), x.size() * 4);
  return r;
}

// One problem's states in every layout a case may ask for.
struct States {
  std::vector<float> p, m, v;
  std::vector<uint16_t> p16, m16, v16, out;
  std::vector<uint32_t> graw;
  States(int64_t n, DType gd, uint64_t seed) {
    NormalRng r(seed, 0);
    for (int64_t i = 0; i < n; ++i) {
      p.push_back(r.next()), m.push_back(0.01f * r.next()), v.push_back(std::fabs(1e-4f * r.next()));
    }
    p16 = bf16_of(p), m16 = bf16_of(m), v16 = bf16_of(v);
    graw.assign(size_t(n), 0);
    std::vector<float> g(static_cast<size_t>(n));
    for (auto& x : g) x = 0.1f * r.next();
    if (gd == DType::f32)
      std::memcpy(graw.data(), g.data(), size_t(n) * 4);
    else
      convert(reinterpret_cast<uint16_t*>(graw.data()), gd, g.data(), DType::f32, size_t(n));
    out.assign(size_t(n), 0);
  }
  AdamTensors tensors(int64_t n, bool master16, bool states16, DType gd, int copy_out, bool sr) {
    AdamTensors t;
    if (master16)
      t.param16 = p16.data();
    else
      t.param = p.data();
    if (states16)
      t.m16 = m16.data(), t.v16 = v16.data();
    else
      t.m = m.data(), t.v = v.data();
    t.grad = graw.data(), t.grad_dtype = gd, t.n = n;
    if (copy_out) t.param_out = out.data(), t.out_dtype = copy_out == 1 ? DType::bf16 : DType::f16;
    t.stochastic = sr, t.seed = 1234, t.index_base = (int64_t(1) << 32) - 600;  // a vector crosses 2^32
    return t;
  }
};

AdamHyper hyper() {
  AdamHyper h;
  h.lr = 1e-2f, h.weight_decay = 0.1f, h.step = 7, h.grad_scale = 0.5f;
  return h;
}

TEST(Adam16, EveryIsaMatchesTheScalarReferenceBitForBit) {
  const int64_t n = 1000 + 13;
  for (AdamIsa isa : {AdamIsa::avx2, AdamIsa::avx512}) {
    if (!host::adam_isa_supported(isa)) {
      std::printf("[ INFO ] %s: not on this CPU\n", std::string(host::adam_isa_name(isa)).c_str());
      continue;
    }
    for (bool master16 : {false, true})
      for (bool states16 : {false, true}) {
        if (!master16 && !states16) continue;  // the f32 kernels (test_cpu_adam)
        for (bool sr : {true, false})
          for (DType gd : {DType::f32, DType::bf16})
            for (int copy_out : {0, 1, 2}) {
              SCOPED_TRACE(std::string(host::adam_isa_name(isa)) + (master16 ? " master bf16" : " master f32") +
                           (states16 ? " m,v bf16" : " m,v f32") + (sr ? " stochastic" : " nearest") + " grad " +
                           std::string(dtype_name(gd)) + " copy-out " + std::to_string(copy_out));
              States ref(n, gd, 5), got(n, gd, 5);
              if (gd == DType::f32)  // a NaN and an Inf gradient: their states go NaN alike everywhere
                for (States* st : {&ref, &got}) st->graw[100] = 0x7f800000u, st->graw[333] = 0x7fc01234u;
              host::adam_step(ref.tensors(n, master16, states16, gd, copy_out, sr), hyper(),
                              {AdamIsa::scalar, 1, 1 << 16});
              host::adam_step(got.tensors(n, master16, states16, gd, copy_out, sr), hyper(), {isa, 0, 256});
              EXPECT_EQ(bits_of(ref.p), bits_of(got.p));
              EXPECT_EQ(bits_of(ref.m), bits_of(got.m));
              EXPECT_EQ(bits_of(ref.v), bits_of(got.v));
              EXPECT_EQ(ref.p16, got.p16);
              EXPECT_EQ(ref.m16, got.m16);
              EXPECT_EQ(ref.v16, got.v16);
              EXPECT_EQ(ref.out, got.out);
            }
      }
  }
}

// With round-to-nearest, bf16 m and v are the f32 update's, each rounded once.
TEST(Adam16, NearestIsTheF32UpdateRoundedOnce) {
  const int64_t n = 777;
  States s16(n, DType::f32, 9), s32(n, DType::f32, 9);
  for (int64_t i = 0; i < n; ++i) s32.m[i] = bf16_to_f32(s32.m16[i]), s32.v[i] = bf16_to_f32(s32.v16[i]);
  host::adam_step(s16.tensors(n, false, true, DType::f32, 1, false), hyper());
  host::adam_step(s32.tensors(n, false, false, DType::f32, 1, false), hyper());
  EXPECT_EQ(s16.p, s32.p);
  EXPECT_EQ(s16.out, s32.out);
  EXPECT_EQ(s16.m16, bf16_of(s32.m));
  EXPECT_EQ(s16.v16, bf16_of(s32.v));
}

// Stochastic rounding: with β1 = 0, m = g exactly in f32; g = 1 + 2⁻⁹ lies a quarter of a
// bf16 step above 1, so a quarter of the elements round up and the mean stays g.
TEST(Adam16, StochasticRoundingIsUnbiasedAndReproducible) {
  const int64_t n = 1 << 16;
  std::vector<float> grad(size_t(n), 1.0f + 0x1p-9f);
  auto run = [&](uint64_t seed, int64_t step, int64_t base, int64_t lo, int64_t hi, int threads, int64_t tile,
                 std::vector<uint16_t>& m16) {
    std::vector<uint16_t> v16(size_t(n), 0), p16(size_t(n), 0x3f80);
    AdamTensors t;
    t.param16 = p16.data() + lo, t.m16 = m16.data() + lo, t.v16 = v16.data() + lo;
    t.grad = grad.data() + lo, t.n = hi - lo, t.seed = seed, t.index_base = base + lo;
    AdamHyper h;
    h.beta1 = 0.0f, h.step = step;
    host::adam_step(t, h, {AdamIsa::automatic, threads, tile});
  };
  std::vector<uint16_t> a(size_t(n), 0), b(size_t(n), 0), c(size_t(n), 0), d(size_t(n), 0), e(size_t(n), 0);
  run(42, 3, 100, 0, n, 1, 1 << 20, a);
  double sum = 0;
  int64_t up = 0;
  for (uint16_t x : a) sum += bf16_to_f32(x), up += x != 0x3f80;
  const double frac = double(up) / double(n), sigma = std::sqrt(0.25 * 0.75 / double(n));
  EXPECT_NEAR(frac, 0.25, 5 * sigma) << "fraction rounded up";
  EXPECT_NEAR(sum / double(n), 1.0 + 0x1p-9, 5 * sigma * 0x1p-7) << "mean";
  // The same (seed, step, index) → the same bits: two shards, a team of threads, small tiles.
  run(42, 3, 100, 0, n / 3, 2, 256, b);
  run(42, 3, 100, n / 3, n, 2, 256, b);
  EXPECT_EQ(a, b);
  // Another seed or step → other bits.
  run(43, 3, 100, 0, n, 1, 1 << 20, c);
  run(42, 4, 100, 0, n, 1, 1 << 20, d);
  EXPECT_NE(a, c);
  EXPECT_NE(a, d);
  // The element's global index, not its position in the call, picks its bits.
  run(42, 3, 101, 0, n, 1, 1 << 20, e);
  EXPECT_NE(a, e);
  EXPECT_TRUE(std::equal(a.begin() + 1, a.end(), e.begin())) << "index_base shifts the bits with the index";
}

}  // namespace
}  // namespace strata
