#include "cpu/gemm.h"

#include <dnnl.h>

#include <algorithm>

#include "core/error.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_lowp.h"
#include "cpu/gemm_path.h"
#include "cpu/omp_threads.h"
#include "host/convert.h"

namespace strata::cpu {

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
           int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  STRATA_CHECK(st == dnnl_success,
               "dnnl_sgemm(M=" + std::to_string(M) + ", N=" + std::to_string(N) + ", K=" + std::to_string(K) +
                   ") failed with status " + std::to_string(int(st)),
               "check the leading dimensions; this is a bug in the caller");
}

// Copies the block of op(X) covering rows [r0, r0+rows) of the stored matrix and columns
// [c0, c0+cols) into a dense f32 panel with leading dimension `cols`.
static void convert_block(float* dst, const GemmOperand& x, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
  const size_t esz = dtype_size(x.dtype);
#pragma omp parallel for schedule(static) if (rows * cols > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const char* src = static_cast<const char*>(x.data) + (size_t(r0 + r) * size_t(x.ld) + size_t(c0)) * esz;
    host::convert_to_f32(dst + r * cols, src, x.dtype, size_t(cols));
  }
}

bool gemm_native(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
                 const LowpOut& C, Workspace& ws) {
  switch (lowp_gemm_mode()) {
    case LowpGemm::off:
      return false;
    case LowpGemm::onednn:
      return lowp_gemm(M, N, K, alpha, A, B, beta, C);
    case LowpGemm::strata:
      break;
  }
  if (!gemm_bf16_accepts(A, B, beta, C)) return false;
  const int threads = thread_count();
  void* scratch = ws.get(Scratch::gemm_a, gemm_bf16_scratch_bytes(M, N, K, C.dtype, threads));
  gemm_bf16(M, N, K, alpha, A, B, beta, C, scratch, threads);
  return true;
}

void gemm(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A, GemmOperand B, float beta, float* C, int64_t ldc,
          Workspace& ws) {
  if (A.dtype == DType::f32 && B.dtype == DType::f32) {
    sgemm(A.trans, B.trans, M, N, K, alpha, static_cast<const float*>(A.data), A.ld, static_cast<const float*>(B.data),
          B.ld, beta, C, ldc);
    return;
  }
  if (gemm_native(M, N, K, alpha, A, B, beta, LowpOut{C, DType::f32, ldc}, ws)) return;
  gemm_panels(M, N, K, alpha, A, B, beta, C, ldc, ws);
}

void gemm_panels(int64_t M, int64_t N, int64_t K, float alpha, GemmOperand A, GemmOperand B, float beta, float* C,
                 int64_t ldc, Workspace& ws) {
  // Panels: K in blocks of kb, N in blocks of nb. A's panel is converted once per K block.
  const int64_t kb = std::min<int64_t>(K, 256), nb = std::min<int64_t>(N, 4096);
  float* a_panel = A.dtype == DType::f32 ? nullptr : ws.get<float>(Scratch::gemm_a, size_t(M * kb));
  float* b_panel = B.dtype == DType::f32 ? nullptr : ws.get<float>(Scratch::gemm_b, size_t(kb * nb));
  for (int64_t k0 = 0; k0 < K; k0 += kb) {
    const int64_t kn = std::min(kb, K - k0);
    const float beta_k = k0 == 0 ? beta : 1.0f;
    // op(A)[:, k0:k0+kn]: stored as rows M × cols K (or K × M when transposed).
    const float* ap;
    int64_t lda;
    if (!a_panel) {
      ap = static_cast<const float*>(A.data) + (A.trans ? k0 * A.ld : k0);
      lda = A.ld;
    } else if (!A.trans) {
      convert_block(a_panel, A, 0, M, k0, kn);
      ap = a_panel, lda = kn;
    } else {
      convert_block(a_panel, A, k0, kn, 0, M);
      ap = a_panel, lda = M;
    }
    for (int64_t n0 = 0; n0 < N; n0 += nb) {
      const int64_t nn = std::min(nb, N - n0);
      const float* bp;
      int64_t ldb;
      if (!b_panel) {
        bp = static_cast<const float*>(B.data) + (B.trans ? n0 * B.ld + k0 : k0 * B.ld + n0);
        ldb = B.ld;
      } else if (!B.trans) {  // stored K × N
        convert_block(b_panel, B, k0, kn, n0, nn);
        bp = b_panel, ldb = nn;
      } else {  // stored N × K
        convert_block(b_panel, B, n0, nn, k0, kn);
        bp = b_panel, ldb = kn;
      }
      sgemm(A.trans, B.trans, M, nn, kn, alpha, ap, lda, bp, ldb, beta_k, C + n0, ldc);
    }
  }
  if (K == 0) {  // C = beta·C
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) C[m * ldc + n] *= beta;
  }
}

}  // namespace strata::cpu
