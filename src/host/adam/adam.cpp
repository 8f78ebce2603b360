// Driver: per-step constants, ISA dispatch, and OpenMP over tiles with a static schedule
// (the same partition first_touch_zero uses, so every thread streams pages it touched).
#include "host/adam/adam.h"

#include <sched.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "core/error.h"
#include "host/adam/adam_kernels.h"

namespace strata::host {

std::string_view adam_isa_name(AdamIsa isa) {
  switch (isa) {
    case AdamIsa::automatic:
      return "auto";
    case AdamIsa::scalar:
      return "scalar";
    case AdamIsa::avx2:
      return "avx2";
    case AdamIsa::avx512:
      return "avx512";
  }
  return "?";
}

AdamIsa parse_adam_isa(std::string_view s) {
  if (s == "auto") return AdamIsa::automatic;
  if (s == "scalar") return AdamIsa::scalar;
  if (s == "avx2") return AdamIsa::avx2;
  if (s == "avx512") return AdamIsa::avx512;
  throw_error("unknown Adam ISA '" + std::string(s) + "'", "use one of auto, scalar, avx2, avx512");
}

bool adam_isa_supported(AdamIsa isa) {
  __builtin_cpu_init();
  switch (isa) {
    case AdamIsa::automatic:
    case AdamIsa::scalar:
      return true;
    case AdamIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case AdamIsa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");  // BW: the 16-bit kernel
  }
  return false;
}

AdamIsa adam_default_isa() {
  if (const char* env = std::getenv("STRATA_ADAM_ISA"); env && *env) {
    const AdamIsa isa = parse_adam_isa(env);
    if (isa != AdamIsa::automatic) {
      STRATA_CHECK(adam_isa_supported(isa), "STRATA_ADAM_ISA=" + std::string(env) + " but this CPU lacks it",
                   "unset STRATA_ADAM_ISA or choose scalar/avx2");
      return isa;
    }
  }
  if (adam_isa_supported(AdamIsa::avx512)) return AdamIsa::avx512;
  if (adam_isa_supported(AdamIsa::avx2)) return AdamIsa::avx2;
  return AdamIsa::scalar;
}

namespace {

adam_impl::KernelFn kernel_for(AdamIsa isa, bool states16) {
  if (isa == AdamIsa::automatic) isa = adam_default_isa();
  STRATA_CHECK(adam_isa_supported(isa),
               "Adam ISA " + std::string(adam_isa_name(isa)) + " requested but this CPU lacks it",
               "use --adam-isa auto");
  switch (isa) {
    case AdamIsa::avx512:
      return states16 ? adam_impl::kernel16_avx512 : adam_impl::kernel_avx512;
    case AdamIsa::avx2:
      return states16 ? adam_impl::kernel16_avx2 : adam_impl::kernel_avx2;
    default:
      return states16 ? adam_impl::kernel16_scalar : adam_impl::kernel_scalar;
  }
}

adam_impl::Consts consts_for(const AdamHyper& h) {
  adam_impl::Consts c{};
  const double t = double(h.step);
  const double bc1 = h.bias_correction ? 1.0 - std::pow(double(h.beta1), t) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(double(h.beta2), t) : 1.0;
  c.beta1 = h.beta1, c.beta2 = h.beta2;
  c.one_minus_beta1 = 1.0f - h.beta1, c.one_minus_beta2 = 1.0f - h.beta2;
  c.step_size = float(-double(h.lr) / bc1);
  c.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  c.eps = h.eps;
  c.decay_mul = h.decoupled ? 1.0f - h.lr * h.weight_decay : 1.0f;
  c.l2 = h.decoupled ? 0.0f : h.weight_decay;
  c.grad_scale = h.grad_scale;
  return c;
}

int threads_for(const AdamOptions& o) {
#ifdef _OPENMP
  return o.threads > 0 ? o.threads : omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace

bool adam_step(const AdamTensors& t, const AdamHyper& h, const AdamOptions& o) {
  const bool states16 = t.m16 || t.v16 || t.param16;
  STRATA_CHECK(t.n >= 0 && (t.n == 0 || ((t.param || t.param16) && (t.m || t.m16) && (t.v || t.v16) && t.grad)),
               "adam_step: missing buffers for " + std::to_string(t.n) + " parameters", "this is a bug in the caller");
  STRATA_CHECK(!states16 || (!(t.m && t.m16) && !(t.v && t.v16) && !(t.param && t.param16)),
               "adam_step: a state given both in f32 and in bf16", "this is a bug in the caller: set one of the two");
  STRATA_CHECK(h.step >= 1, "adam_step: step " + std::to_string(h.step), "steps count from 1");
  STRATA_CHECK(!t.param_out || t.out_dtype != DType::f32, "adam_step: copy-out dtype f32",
               "the copy-out is bf16 or f16; the f32 master is already updated in place");
  if (t.n == 0) return false;
  const adam_impl::KernelFn kernel = kernel_for(o.isa, states16);
  adam_impl::Consts c = consts_for(h);
  // The stochastic rounding's keys: a function of (seed, step) only, never of the thread,
  // tile or rank that updates an element.
  const kernel_math::Adam16Keys keys = kernel_math::adam16_keys(t.seed, h.step);
  c.key_lo = keys.lo, c.key_hi = keys.hi, c.key_p = keys.p;
  const int64_t tile = std::max<int64_t>(o.tile, 64), tiles = (t.n + tile - 1) / tile;
  bool nonfinite = false;
#pragma omp parallel for schedule(static) num_threads(threads_for(o)) reduction(|| : nonfinite) if (tiles > 1)
  for (int64_t k = 0; k < tiles; ++k) nonfinite = kernel(t, k * tile, std::min(t.n, (k + 1) * tile), c) || nonfinite;
  return nonfinite;
}

void first_touch_zero(float* p, int64_t n, const AdamOptions& o) {
  const int64_t tile = std::max<int64_t>(o.tile, 64), tiles = (n + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(threads_for(o)) if (tiles > 1)
  for (int64_t k = 0; k < tiles; ++k) {
    const int64_t b = k * tile, e = std::min(n, b + tile);
    for (int64_t i = b; i < e; ++i) p[i] = 0.0f;
  }
}

std::string pin_threads_to_physical_cores(int threads) {
  // One CPU per physical core: the first of each thread_siblings_list, in CPU order.
  std::vector<int> cores;
  std::set<std::string> seen;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof allowed, &allowed);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    std::string siblings;
    if (!(f >> siblings)) siblings = std::to_string(cpu);
    if (seen.insert(siblings).second) cores.push_back(cpu);
  }
  STRATA_CHECK(!cores.empty(), "no CPUs found to pin threads to", "check the process's CPU affinity");
  const int n = threads > 0 ? threads : threads_for({});
  std::vector<int> chosen(size_t(n), -1);
  std::vector<int> errors(size_t(n), 0);
#pragma omp parallel num_threads(n)
  {
    int id = 0;
#ifdef _OPENMP
    id = omp_get_thread_num();
#endif
    const int cpu = cores[size_t(id) % cores.size()];
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    errors[size_t(id)] = sched_setaffinity(0, sizeof one, &one);
    chosen[size_t(id)] = cpu;
  }
  std::string list;
  for (int i = 0; i < n; ++i) {
    STRATA_CHECK(errors[size_t(i)] == 0,
                 "pinning thread " + std::to_string(i) + " to CPU " + std::to_string(chosen[size_t(i)]) + " failed",
                 "check the process's CPU affinity (taskset, cgroups)");
    if (i) list += ',';
    list += std::to_string(chosen[size_t(i)]);
  }
  return list;
}

}  // namespace strata::host
