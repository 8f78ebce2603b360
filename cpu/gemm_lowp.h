// oneDNN's native 16-bit GEMM: C[M,N] (f32) = alpha·op(A)·op(B) + beta·C with A and B
// both bf16 (or both f16), through its matmul primitive where the CPU computes in that
// format — AMX, AVX512-BF16, AVX512-FP16 — with f32 accumulation. The primitive, its memory
// objects and its scratchpad are made once per shape (per thread) and reused; executing it
// still allocates a few small heap blocks inside oneDNN. It returns false where oneDNN has no
// native kernel (AVX2 only, or the shape). cpu/gemm_path.h says where the linear layers take
// it; bench model's bound always uses it.
#pragma once
#include <cstdint>
#include <string>

#include "cpu/gemm.h"
#include "cpu/gemm_path.h"

namespace strata::cpu {

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
