// oneDNN's native 16-bit GEMM: C[M,N] (f32) = alpha·op(A)·op(B) + beta·C with A and B
// both bf16 (or both f16), through its matmul primitive where the CPU computes in that
// format — AMX, AVX512-BF16, AVX512-FP16 — with f32 accumulation. The primitive, its memory
// objects and its scratchpad are made once per shape (per thread) and reused. It returns
// false where oneDNN has no native kernel (AVX2 only, or the shape).
//
// The default only where oneDNN runs bf16 on AMX: its primitive execution allocates on the
// heap at every call (its argument map, a few small blocks), which Strata's own code never
// does in the steady-state step, but AMX's tiles run the step's GEMMs several times faster
// than anything without them. Elsewhere the default is Strata's own AVX512-BF16 kernel
// (cpu/gemm_bf16.h) or the f32 panels; STRATA_LOWP_GEMM=onednn chooses this one for the
// linear layers anywhere (AVX512-FP16 too), and bench model's bound always uses it.
#pragma once
#include <cstdint>
#include <string>

#include "cpu/gemm.h"

namespace strata::cpu {

// Which native path 16-bit GEMMs take, from STRATA_LOWP_GEMM, read once:
//   unset or auto: oneDNN's matmul where it runs on AMX (lowp_gemm_amx_impl), else Strata's
//     AVX512-BF16 kernel where it beats the f32 panels (gemm_bf16_pays), else the f32 panels
//     (AVX2 only, and the half-rate AVX512-BF16 of Intel Xeons without AMX);
//   strata: that kernel wherever the CPU has AVX512-BF16; off (or 0): always the f32 panels;
//   onednn (or 1): oneDNN's matmul primitive where it computes natively (allocates per call).
enum class LowpGemm { off, strata, onednn };
LowpGemm lowp_gemm_mode();

// oneDNN's bf16 matmul implementation when it is an AMX one (e.g. "brg:avx512_core_amx_bf16";
// ONEDNN_MAX_CPU_ISA caps it), else empty. Probed once, on one primitive descriptor.
std::string lowp_gemm_amx_impl();

// impl (optional): oneDNN's implementation for this shape ("none (...)" when it has none).
bool lowp_gemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
               const LowpOut& C, std::string* impl = nullptr);
inline bool lowp_gemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B,
                      float beta, float* C, int64_t ldc, std::string* impl = nullptr) {
  return lowp_gemm(M, N, K, alpha, A, B, beta, LowpOut{C, DType::f32, ldc}, impl);
}

}  // namespace strata::cpu
