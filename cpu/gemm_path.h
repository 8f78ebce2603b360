// Which path a GEMM with two 16-bit operands takes on this CPU, decided once from its
// features:
//   - AMX-BF16 (with the tiles granted by Linux): oneDNN's matmul primitive, whose brgemm
//     kernels run on the tiles (cpu/gemm_lowp.h). Nothing else on the CPU comes near the
//     tiles' rate, which outweighs the few heap blocks oneDNN allocates per execution.
//   - AVX512-BF16 on AMD: Strata's own kernel (cpu/gemm_bf16.h). These cores issue
//     vdpbf16ps at the rate of vfmadd231ps and it does twice the multiply-adds, so bf16
//     operands beat widening them to f32. oneDNN's matmul computes natively here too, but
//     allocates inside every execution, which the steady-state step must not; the kernel
//     allocates nothing.
//   - Anything else: the f32 panels (cpu/gemm.h), which widen the operands a cache-sized
//     panel at a time and run oneDNN's sgemm. On AVX2 there is no bf16 arithmetic, and Intel
//     cores with AVX512-BF16 but no AMX issue vdpbf16ps at half the vfmadd231ps rate, where
//     both 16-bit kernels lose to the f32 sgemm.
// The rule is a table of features, not a timing, so every process on a machine takes the same
// path and a resumed run rounds as the first one did. docs/benchmarks holds the measurements
// behind it; `strata bench linear` times every path this CPU has.
#pragma once
#include <string_view>

namespace strata::cpu {

enum class LowpGemm {
  off,     // the f32 panels
  strata,  // Strata's AVX512-BF16 kernel
  onednn,  // oneDNN's matmul primitive where it computes natively
};

// What the rule looks at.
struct GemmCpu {
  bool amx_bf16 = false;     // AMX-BF16, usable by this process
  bool avx512_bf16 = false;  // AVX512-BF16 with AVX512-BW/VL, the zmm state saved by the OS
  bool amd = false;          // an AMD core
};

GemmCpu this_gemm_cpu();
LowpGemm default_lowp_gemm(const GemmCpu& cpu);

// The path for this process: STRATA_LOWP_GEMM (read once) names one for tests and
// benchmarks — auto (the rule), strata (where the CPU has AVX512-BF16, else off), onednn (or
// 1: oneDNN's matmul wherever it has a native kernel, AVX512-BF16 and AVX512-FP16 without
// AMX too) or off (or 0) — else default_lowp_gemm(this_gemm_cpu()).
LowpGemm lowp_gemm_mode();

std::string_view lowp_gemm_name(LowpGemm path);  // "panels", "strata" or "onednn"

}  // namespace strata::cpu
