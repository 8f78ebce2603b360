// Native 16-bit GEMM (S14): C[M,N] (f32) = alpha·op(A)·op(B) + beta·C with A and B both bf16
// (or both f16), through oneDNN's matmul primitive where the CPU computes in that format —
// AMX, AVX512-BF16, AVX512-FP16 — with f32 accumulation. The primitive, its memory objects
// and its scratchpad are made once per shape (per thread) and reused. Elsewhere (AVX2 only,
// or a shape oneDNN has no native kernel for) it returns false and cpu::gemm converts to f32
// panels as before.
//
// Opt-in for now (STRATA_LOWP_GEMM=1): oneDNN 2.6's primitive execution allocates on the
// heap at every call (~6 allocations, its argument map), which breaks the steady-state
// step's no-allocation rule (HostAllocations test), and attention with its probabilities and
// dS rounded to bf16 leaves one element each of two gradients outside the existing bf16
// tolerance against PyTorch (GPT2Torch.Bf16MatchesPyTorchWithinBf16Tolerance). bench model's
// bound uses it regardless.
#pragma once
#include <cstdint>
#include <string>

#include "cpu/gemm.h"

namespace strata::cpu {

bool lowp_gemm_enabled();  // STRATA_LOWP_GEMM=1

// The output: f32, or the operands' 16-bit type (rounded once from the f32 sum), and an
// optional bias per column (f32 or that type) added before the rounding — the linear layer's
// whole forward in one pass.
struct LowpOut {
  void* data;
  DType dtype;
  int64_t ld;
  const void* bias = nullptr;
  DType bias_dtype = DType::f32;
};

// impl (optional): oneDNN's implementation for this shape ("none (...)" when it has none).
bool lowp_gemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
               const LowpOut& C, std::string* impl = nullptr);
inline bool lowp_gemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B,
                      float beta, float* C, int64_t ldc, std::string* impl = nullptr) {
  return lowp_gemm(M, N, K, alpha, A, B, beta, LowpOut{C, DType::f32, ldc}, impl);
}

}  // namespace strata::cpu
