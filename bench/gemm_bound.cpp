#include "bench/gemm_bound.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemm_lowp.h"
#include "host/convert.h"

namespace strata::bench {

std::vector<StepGemm> step_gemms(const ModelSpec& spec, int batch, int seq_len) {
  const int64_t BT = int64_t(batch) * seq_len;
  std::vector<StepGemm> shapes;
  for (const LinearShape& l : spec.family->linears(spec)) {
    shapes.push_back({BT, l.out, l.in, false, true, 0.0f, l.count});   // y = x·Wᵀ
    shapes.push_back({BT, l.in, l.out, false, false, 0.0f, l.count});  // dx = dy·W
    shapes.push_back({l.out, l.in, BT, true, false, 1.0f, l.count});   // dW += dyᵀ·x
  }
  return shapes;
}

GemmBound measure_gemm_bound(const ModelSpec& spec, int batch, int seq_len, DType dtype, int reps) {
  const std::vector<StepGemm> shapes = step_gemms(spec, batch, seq_len);
  size_t most = 0;
  for (const StepGemm& s : shapes) most = std::max({most, size_t(s.M * s.K), size_t(s.K * s.N), size_t(s.M * s.N)});
  std::vector<float> a(most, 0.01f), b(most, 0.02f), c(most, 0.0f);
  std::vector<uint16_t> a16(most), b16(most);
  const bool low = dtype != DType::f32;
  if (low) {
    host::convert_from_f32(a16.data(), dtype, a.data(), most);
    host::convert_from_f32(b16.data(), dtype, b.data(), most);
  }
  GemmBound r;
  double seconds = 0, largest = 0;
  for (const StepGemm& s : shapes) {
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    // The faster of oneDNN's native 16-bit matmul (where it has one) and its sgemm on the
    // widened operands, as the step itself takes the faster path (cpu/gemm_lowp.h).
    auto best_of = [&](auto call) {
      double best = 1e30;
      for (int k = 0; k < reps + 1; ++k) {  // the first call makes the primitive
        const auto t0 = std::chrono::steady_clock::now();
        if (!call()) return best;
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (k > 0) best = std::min(best, dt);
      }
      return best;
    };
    std::string impl = "none";
    const double native = !low ? 1e30 : best_of([&] {
      return cpu::lowp_gemm(s.M, s.N, s.K, 1.0f, {a16.data(), dtype, lda, s.ta}, {b16.data(), dtype, ldb, s.tb}, s.beta,
                            c.data(), s.N, &impl);
    });
    const double f32 = best_of([&] {
      cpu::sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(), s.N);
      return true;
    });
    const double best = std::min(native, f32);
    if (low)
      impl = native <= f32 ? impl : "sgemm (f32 beats native " + std::string(dtype_name(dtype)) + ": " + impl + ")";
    else
      impl = "sgemm";
    const double flops = s.flops();
    seconds += s.count * best;
    r.flops_per_step += s.count * flops;
    if (flops > largest) largest = flops, r.impl = impl;
  }
  r.gflops = r.flops_per_step / seconds * 1e-9;
  return r;
}

}  // namespace strata::bench
