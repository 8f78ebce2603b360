// Row-major GEMM with f32 accumulation: C[M,N] = alpha·op(A)·op(B) + beta·C.
// A and B may each be f32, bf16 or f16. f32×f32 goes straight to oneDNN's sgemm; two 16-bit
// operands to oneDNN's native 16-bit matmul where the CPU has one (cpu/gemm_lowp.h); other
// inputs are converted to f32 in cache-sized panels, so no full-size copy is ever made.
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

void gemm(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A, GemmOperand B, float beta, float* C, int64_t ldc,
          Workspace& ws);

// Thin checked wrapper over dnnl_sgemm.
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace strata::cpu
