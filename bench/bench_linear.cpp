#include "bench/bench_linear.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "bench/bf16_dot_rate.h"
#include "bench/gemm_bound.h"
#include "cpu/cpu_backend.h"
#include "cpu/gemm.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_lowp.h"
#include "cpu/gemm_path.h"
#include "cpu/omp_threads.h"
#include "host/convert.h"
#include "model/model_spec.h"
#include "train/trainer.h"

namespace strata::bench {

namespace {

using cpu::LowpGemm;

// One path's call: C = op(A)·op(B) + beta·C in f32 from bf16 operands; false where the path
// does not take this shape on this CPU.
using PathCall = std::function<bool(const StepGemm&, const void* a, const void* b, float* c)>;

struct PathTime {
  double seconds = 0;    // per step, over the shapes it took
  bool took_all = true;  // every shape
  double max_diff = 0;   // largest |C - C_panels| / max|C_panels| over the shapes
};

}  // namespace

int run_linear_bench(const LinearBenchOptions& o) {
  const ModelSpec spec = ModelSpec::load(resolve_model(o.model));
  const std::vector<StepGemm> shapes = step_gemms(spec, o.micro_batch, o.seq_len);
  const int threads = cpu::thread_count();
  size_t most = 0;
  for (const StepGemm& s : shapes) most = std::max({most, size_t(s.M * s.K), size_t(s.K * s.N), size_t(s.M * s.N)});
  // Operands with varied values (the rounding differences between paths then show).
  std::vector<float> a(most), b(most);
  for (size_t i = 0; i < most; ++i)
    a[i] = 0.01f * float(int(i * 7919 % 201) - 100), b[i] = 0.01f * float(int(i * 104729 % 199) - 99);
  std::vector<bf16> a16(most), b16(most);
  host::convert_from_f32(a16.data(), DType::bf16, a.data(), most);
  host::convert_from_f32(b16.data(), DType::bf16, b.data(), most);
  std::vector<float> c(most), ref(most);
  cpu::CpuBackend be({size_t(1) << 30, 0, /*opaque=*/false});  // the panels' scratch: host-addressable
  cpu::Workspace ws([&](size_t n, const std::string& tag) { return be.allocate(n, tag); });
  std::vector<char> scratch;

  const cpu::GemmCpu features = cpu::this_gemm_cpu();
  const LowpGemm rule = cpu::default_lowp_gemm(features);
  const auto operand = [](const void* p, int64_t ld, bool t) { return cpu::GemmOperand{p, DType::bf16, ld, t}; };
  std::vector<std::pair<LowpGemm, PathCall>> paths;
  paths.push_back({LowpGemm::off, [&](const StepGemm& s, const void* pa, const void* pb, float* pc) {
                     cpu::gemm_panels(s.M, s.N, s.K, 1.0f, operand(pa, s.ta ? s.M : s.K, s.ta),
                                      operand(pb, s.tb ? s.K : s.N, s.tb), s.beta, pc, s.N, ws);
                     return true;
                   }});
  if (features.avx512_bf16)
    paths.push_back({LowpGemm::strata, [&](const StepGemm& s, const void* pa, const void* pb, float* pc) {
                       scratch.resize(cpu::gemm_bf16_scratch_bytes(s.M, s.N, s.K, DType::f32, threads));
                       cpu::gemm_bf16(s.M, s.N, s.K, 1.0f, operand(pa, s.ta ? s.M : s.K, s.ta),
                                      operand(pb, s.tb ? s.K : s.N, s.tb), s.beta, cpu::LowpOut{pc, DType::f32, s.N},
                                      scratch.data(), threads);
                       return true;
                     }});
  paths.push_back({LowpGemm::onednn, [&](const StepGemm& s, const void* pa, const void* pb, float* pc) {
                     return cpu::lowp_gemm(s.M, s.N, s.K, 1.0f, operand(pa, s.ta ? s.M : s.K, s.ta),
                                           operand(pb, s.tb ? s.K : s.N, s.tb), s.beta, pc, s.N);
                   }});

  std::printf("bench linear: %s, B=%d T=%d, bf16 operands, %d threads; this CPU: AMX-BF16 %s, AVX512-BF16 %s, %s\n",
              o.model.c_str(), o.micro_batch, o.seq_len, threads, features.amx_bf16 ? "yes" : "no",
              features.avx512_bf16 ? "yes" : "no", features.amd ? "AMD" : "not AMD");
  std::printf("%-28s", "shape (M×N×K, per step)");
  for (const auto& [p, call] : paths) std::printf(" %14s", (std::string(cpu::lowp_gemm_name(p)) + " GF/s").c_str());
  std::printf("\n");
  std::vector<PathTime> times(paths.size());
  double flops = 0;
  for (const StepGemm& s : shapes) {
    flops += s.count * s.flops();
    char name[64];
    std::snprintf(name, sizeof name, "%lld×%lld×%lld%s ×%d", (long long)s.M, (long long)s.N, (long long)s.K,
                  s.ta   ? " (Aᵀ)"
                  : s.tb ? " (Bᵀ)"
                         : "",
                  s.count);
    std::printf("%-28s", name);
    for (size_t k = 0; k < paths.size(); ++k) {
      double best = 1e30;
      bool took = true;
      for (int rep = 0; rep <= o.reps && took; ++rep) {  // the first call packs, probes, makes primitives
        std::fill(c.begin(), c.begin() + s.M * s.N, 0.5f);
        const auto t0 = std::chrono::steady_clock::now();
        took = paths[k].second(s, a16.data(), b16.data(), c.data());
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0) best = std::min(best, dt);
      }
      if (!took) {
        times[k].took_all = false;
        std::printf(" %14s", "n/a");
        continue;
      }
      times[k].seconds += s.count * best;
      if (k == 0) std::copy(c.begin(), c.begin() + s.M * s.N, ref.begin());
      double diff = 0, scale = 0;
      for (int64_t i = 0; i < s.M * s.N; ++i)
        diff = std::max(diff, double(std::fabs(c[size_t(i)] - ref[size_t(i)]))),
        scale = std::max(scale, double(std::fabs(ref[size_t(i)])));
      times[k].max_diff = std::max(times[k].max_diff, scale > 0 ? diff / scale : diff);
      std::printf(" %14.1f", s.flops() / best * 1e-9);
    }
    std::printf("\n");
  }
  size_t rule_at = 0;
  for (size_t k = 0; k < paths.size(); ++k)
    if (paths[k].first == rule) rule_at = k;
  nlohmann::json result = {{"bench", "linear"},
                           {"model", o.model},
                           {"batch", o.micro_batch},
                           {"seq_len", o.seq_len},
                           {"threads", threads},
                           {"amx_bf16", features.amx_bf16},
                           {"avx512_bf16", features.avx512_bf16},
                           {"amd", features.amd},
                           {"default", cpu::lowp_gemm_name(rule)}};
  if (features.avx512_bf16) result["bf16_dot_speedup"] = bf16_dot_speedup();
  std::printf("%-8s %10s %14s %12s\n", "path", "GFLOP/s", "÷ default", "max diff");
  for (size_t k = 0; k < paths.size(); ++k) {
    const std::string name(cpu::lowp_gemm_name(paths[k].first));
    if (!times[k].took_all) {
      std::printf("%-8s %10s %14s %12s   (no native kernel for every shape here)\n", name.c_str(), "n/a", "", "");
      result["paths"][name] = nullptr;
      continue;
    }
    const double gflops = flops / times[k].seconds * 1e-9;
    const double ratio = times[rule_at].seconds / times[k].seconds;
    std::printf("%-8s %10.1f %14.3f %12.2e%s\n", name.c_str(), gflops, ratio, times[k].max_diff,
                k == rule_at ? "   (default here)" : "");
    result["paths"][name] = {{"gflops", gflops}, {"vs_default", ratio}, {"max_diff", times[k].max_diff}};
  }
  if (result.contains("bf16_dot_speedup"))
    std::printf("AVX512-BF16's dot products at %.2f× the f32 multiply-add rate\n", double(result["bf16_dot_speedup"]));
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace strata::bench
