// gemm_bf16's checks and sizes, built for the baseline target (the kernels live in
// gemm_bf16_avx512.cpp, built for AVX512-BF16 and entered only when gemm_bf16_supported()).
#include "cpu/gemm_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace strata::cpu {

bool gemm_bf16_supported() {
  // libgcc's cpuid check includes XCR0 (the OS saves the zmm state).
  static const bool has =
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return has;
}

bool gemm_bf16_accepts(const GemmOperand& A, const GemmOperand& B, float beta, const LowpOut& C) {
  if (A.dtype != DType::bf16 || B.dtype != DType::bf16) return false;
  if (C.dtype != DType::f32 && (C.dtype != DType::bf16 || beta != 0.0f)) return false;
  return !C.bias || C.bias_dtype == DType::f32 || C.bias_dtype == DType::bf16;
}

size_t gemm_bf16_scratch_bytes(int64_t M, int64_t N, int64_t K, DType out_dtype, int threads) {
  using namespace bf16gemm;
  const int64_t P = pair_steps(K);
  const int64_t kc = std::min(kKC, std::max<int64_t>(P, 1)), mc = std::min(kMC, round_up(M, kMR)),
                nc = std::min(kNC, round_up(N, kNR));
  size_t bytes = 64 + size_t(threads) * size_t(mc * kc) * 4 + 64 + size_t(kc * nc) * 4 + 64;
  if (out_dtype != DType::f32 && P > kKC) bytes += size_t(M * N) * 4;  // f32 sums between K blocks
  return bytes;
}

}  // namespace strata::cpu
