// Row-major GEMM with f32 accumulation: C[M,N] = alpha·op(A)·op(B) + beta·C.
// A and B may each be f32, bf16 or f16. f32×f32 goes straight to oneDNN's sgemm; two 16-bit
// operands to the native path this CPU takes (gemm_native, cpu/gemm_path.h); other inputs
// are converted to f32 in cache-sized panels, so no full-size copy is ever made.
#pragma once
#include <cstdint>

#include "core/dtype.h"
#include "cpu/workspace.h"

namespace strata::cpu {

struct GemmOperand {
  const void* data;
  DType dtype;
  int64_t ld;  // leading dimension in elements
  bool trans;  // op(X) = X^T
};

// A 16-bit GEMM's output: f32, or the operands' 16-bit type (rounded once from the f32 sum),
// and an optional bias per column (f32 or that type) added before the rounding — the linear
// layer's whole forward in one pass.
struct LowpOut {
  void* data;
  DType dtype;
  int64_t ld;
  const void* bias = nullptr;
  DType bias_dtype = DType::f32;
};

void gemm(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A, GemmOperand B, float beta, float* C, int64_t ldc,
          Workspace& ws);

// The f32 panels alone: each 16-bit operand widened a cache-sized panel at a time into
// oneDNN's sgemm (what gemm does when no native path takes the operands).
void gemm_panels(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A, GemmOperand B, float beta, float* C,
                 int64_t ldc, Workspace& ws);

// The same on the native 16-bit path this CPU takes (cpu/gemm_path.h's lowp_gemm_mode),
// with a fused output; false when that path does not take these operands (the caller then
// uses gemm and converts).
bool gemm_native(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
                 const LowpOut& C, Workspace& ws);

// Thin checked wrapper over dnnl_sgemm.
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace strata::cpu
