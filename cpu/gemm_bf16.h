// Strata's own bf16 GEMM on AVX512-BF16's dot-product instruction: C = alpha·op(A)·op(B)
// + beta·C with A and B bf16 and f32 accumulation (each product of two bf16 values is exact
// in f32, as in the f32 panels that widen them).
//
// Blocked as BLIS/GotoBLAS do: B in K×4096 blocks packed into 32-column micro-panels of bf16
// pairs, A in 192-row blocks packed into 12-row micro-panels, a 12×32 register tile of f32
// accumulators fed by vdpbf16ps with A's pairs broadcast. Every layout (either operand
// transposed, any leading dimension) is handled by the packing; the epilogue adds the bias,
// applies alpha and beta, and writes f32 or bf16 (rounded once, to nearest even) with masked
// edges. All memory comes from the caller's scratch: nothing is allocated per call (oneDNN's
// matmul primitive allocates inside every execution). cpu/gemm_path.h says where it is the
// default.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cpu/gemm.h"

namespace strata::cpu {

// The CPU has AVX512-BF16 (and AVX512-BW/VL), and the OS saves the AVX-512 state.
bool gemm_bf16_supported();

// Whether gemm_bf16 computes this call: A and B bf16; the output f32, or bf16 with beta 0; a
// bias f32 or bf16.
bool gemm_bf16_accepts(const GemmOperand& A, const GemmOperand& B, float beta, const LowpOut& C);

// Scratch bytes one call needs with `threads` threads (1: the caller is itself one of many
// threads, each with its own scratch).
size_t gemm_bf16_scratch_bytes(int64_t M, int64_t N, int64_t K, DType out_dtype, int threads);

// `scratch` holds gemm_bf16_scratch_bytes(...) bytes. threads > 1 runs its own OpenMP team.
void gemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
               const LowpOut& C, void* scratch, int threads);

namespace bf16gemm {
constexpr int64_t kMR = 12, kNR = 32;  // the register tile: 12 rows × 2 zmm of f32
constexpr int64_t kMC = 192;           // rows of A per packed block (L2)
constexpr int64_t kKC = 512;           // bf16 pairs of K per block: a B micro-panel is 64 KiB (L2);
                                       // K up to 1024 in one pass over C
constexpr int64_t kNC = 4096;          // columns of B per packed block
inline int64_t pair_steps(int64_t K) { return (K + 1) / 2; }
inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
}  // namespace bf16gemm

}  // namespace strata::cpu
