// Strata's own AMX bf16 GEMM for attention's small per-head products. oneDNN 2.6 gives no
// public brgemm, and its matmul primitive picks a non-AMX GEMM ("gemm:jit", far below AMX's
// rate at these sizes) for the strided per-head operands, so it cannot serve attention.
// Here A is read in place (any row stride) and B is packed once per head into AMX's
// B-tile layout: tile (column block of 16, K chunk of 32) is 16 rows of 64 bytes, row r holding
// (B[2r, n], B[2r+1, n]) for its 16 columns n.
//
// Entered only where amx_ready(): the CPU has AMX-BF16 and Linux granted this process the
// tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace strata::cpu {

bool amx_ready();

// The packed size of a K × N B operand, in bf16 elements (K, N multiples of 32).
inline size_t amx_packed_elems(int64_t K, int64_t N) { return size_t(K * N); }

// B = bᵀ where b is N rows of K bf16 (row stride ldb, even): the score GEMMs' keys.
void amx_pack_bt(bf16* dst, const bf16* b, int64_t ldb, int64_t N, int64_t K);
// B = b where b is K rows of N bf16 (row stride ldb).
void amx_pack_b(bf16* dst, const bf16* b, int64_t ldb, int64_t K, int64_t N);

// C[M, N] (f32, row stride ldc) = alpha · A[M, K] · B[0:K, n0:n0+N], A bf16 rows (row stride
// lda), B packed from packed_k rows (K ≤ packed_k). M, N, K and packed_k multiples of 32.
void amx_gemm(int64_t M, int64_t N, int64_t K, float alpha, const bf16* a, int64_t lda, const bf16* b_packed,
              int64_t packed_k, int64_t n0, float* c, int64_t ldc);

}  // namespace strata::cpu
