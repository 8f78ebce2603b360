// The fused CPU Adam/AdamW kernel family.
//
// One pass over memory per step: read param, grad, m, v; write param, m, v (28 B/param in
// f32), plus optionally the updated parameter as bf16/f16 into a separate buffer (2 B/param)
// for the compute copy. Gradients may be f32, bf16 or f16 (widened in registers). The pass
// also reports whether any gradient was non-finite, so loss-scale skipping needs no second
// pass over the gradients.
//
// The same update also runs on 16-bit states (AdamTensors::m16/v16/param16): m and v in bf16
// (8 B of state per parameter instead of 12, 6 with a bf16 master), rounded stochastically or
// to nearest.
//
// Implementations: AVX-512, AVX2+FMA and scalar, compiled into one binary and chosen at run
// time from cpuid; STRATA_ADAM_ISA=scalar|avx2|avx512 (or AdamOptions::isa) overrides. All
// three perform the same IEEE operations in the same order (explicit FMAs), so they agree
// bit for bit (tests/test_cpu_adam.cpp).
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace strata::host {

enum class AdamIsa { automatic, scalar, avx2, avx512 };
std::string_view adam_isa_name(AdamIsa isa);
AdamIsa parse_adam_isa(std::string_view s);  // auto|scalar|avx2|avx512
// The ISA `automatic` resolves to here: STRATA_ADAM_ISA if set, else the best the CPU has.
AdamIsa adam_default_isa();
bool adam_isa_supported(AdamIsa isa);

struct AdamHyper {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.0f;
  bool decoupled = true;        // AdamW (decoupled decay); false = Adam with L2 (g += wd·p)
  bool bias_correction = true;  // divide m, v by 1-β^t
  int64_t step = 1;             // 1-based step count t
  float grad_scale = 1.0f;      // gradients are multiplied by this first (unscale and/or clip)
};

struct AdamTensors {
  float* param = nullptr;  // f32 master, updated in place (or written from param_in)
  float* m = nullptr;      // f32 first moment, in place (or written from m_in)
  float* v = nullptr;      // f32 second moment, in place (or written from v_in)
  // Out of place: read the state from these, write it to param/m/v (same pass, same
  // bandwidth). Speculative offloaded steps keep the committed state intact this way.
  const float* param_in = nullptr;
  const float* m_in = nullptr;
  const float* v_in = nullptr;
  const void* grad = nullptr;
  DType grad_dtype = DType::f32;
  void* param_out = nullptr;  // optional: updated parameter written as out_dtype (RNE)
  DType out_dtype = DType::bf16;
  int64_t n = 0;
  // 16-bit states: m and v in bf16 (m16, v16 and their _in twins instead of m, v), the
  // master in bf16 (param16 instead of param), or both. Each state is widened to f32, updated
  // with the same arithmetic as above and rounded back once: stochastically, with 16 random
  // bits per element from (seed, step, index_base + i) — so a resumed run, or the same
  // element on another rank's shard, rounds the same way — or to nearest even.
  uint16_t* m16 = nullptr;
  uint16_t* v16 = nullptr;
  uint16_t* param16 = nullptr;
  const uint16_t* m16_in = nullptr;
  const uint16_t* v16_in = nullptr;
  const uint16_t* param16_in = nullptr;
  bool stochastic = true;  // else round to nearest even
  uint64_t seed = 0;
  int64_t index_base = 0;  // the global index of element 0 (a shard's offset in the model)
};

struct AdamOptions {
  AdamIsa isa = AdamIsa::automatic;
  int threads = 0;         // 0 = OpenMP's default
  int64_t tile = 1 << 16;  // elements per work item: 64 Ki × 28 B ≈ 1.8 MB streamed per tile
};

// Returns true if any gradient element was NaN or ±Inf (the update still ran on all
// elements; callers that skip such steps detect overflow before updating, see docs).
bool adam_step(const AdamTensors& t, const AdamHyper& h, const AdamOptions& o = {});

// Pins the OpenMP threads (count `threads`, 0 = default) one per physical core, in order.
// Returns the CPUs chosen. Threads keep the pinning for the life of the process.
std::string pin_threads_to_physical_cores(int threads);

// Zero-fills with the same static tile partition as adam_step, so each page is first
// touched by the thread that will stream it.
void first_touch_zero(float* p, int64_t n, const AdamOptions& o = {});

}  // namespace strata::host
