#include "cpu/gemm_amx.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "core/error.h"
#include "cpu/simd512.h"

namespace strata::cpu {

namespace {

constexpr int64_t kTileK = 32;  // bf16 per A-tile row (64 bytes)
constexpr int64_t kTileN = 16;  // f32 columns per C tile
constexpr size_t kTileElems = 16 * 32;

// The 64-byte tile configuration: tiles 0-3 C (16 × 16 f32), 4-5 A (16 × 32 bf16), 6-7 B
// (16 rows of 32 bf16 pairs).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) colsb[t] = 64, rows[t] = 16;
  }
};

}  // namespace

bool amx_ready() {
  static const bool ready = [] {
    // libgcc's check includes XCR0 (the OS saves the tile state), as gemm_bf16_supported's does.
    if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ready;
}

void amx_pack_bt(bf16* dst, const bf16* b, int64_t ldb, int64_t N, int64_t K) {
  // Tile (nb, kc): row r, column n = the bf16 pair at b[nb·16 + n, kc·32 + 2r]: a 16 × 16
  // transpose of 32-bit pairs, one gather per tile row (of 32-bit units: ldb even).
  STRATA_CHECK(ldb % 2 == 0, "amx_pack_bt: odd row stride " + std::to_string(ldb), "this is a bug in the caller");
  const __m512i rows = simd512::lane_offsets(int32_t(ldb / 2));  // in 32-bit units
  for (int64_t nb = 0; nb < N / kTileN; ++nb)
    for (int64_t kc = 0; kc < K / kTileK; ++kc) {
      bf16* t = dst + (nb * (K / kTileK) + kc) * int64_t(kTileElems);
      const bf16* src = b + nb * kTileN * ldb + kc * kTileK;
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(t + r * 32, _mm512_i32gather_epi32(rows, src + 2 * r, 4));
    }
}

void amx_pack_b(bf16* dst, const bf16* b, int64_t ldb, int64_t K, int64_t N) {
  // Tile (nb, kc): row r, column n = (b[kc·32 + 2r, nb·16 + n], b[kc·32 + 2r + 1, nb·16 + n]):
  // two rows of 16 interleaved.
  for (int64_t nb = 0; nb < N / kTileN; ++nb)
    for (int64_t kc = 0; kc < K / kTileK; ++kc) {
      bf16* t = dst + (nb * (K / kTileK) + kc) * int64_t(kTileElems);
      for (int r = 0; r < 16; ++r) {
        const bf16* even = b + (kc * kTileK + 2 * r) * ldb + nb * kTileN;
        const __m512i e = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even)));
        const __m512i o = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(even + ldb)));
        _mm512_storeu_si512(t + r * 32, _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
      }
    }
}

void amx_gemm(int64_t M, int64_t N, int64_t K, float alpha, const bf16* a, int64_t lda, const bf16* b_packed,
              int64_t packed_k, int64_t n0, float* c, int64_t ldc) {
  static const TileConfig config;
  _tile_loadconfig(&config);
  const int64_t kchunks = K / kTileK;
  const size_t a_stride = size_t(lda) * sizeof(bf16), c_stride = size_t(ldc) * sizeof(float);
  for (int64_t m = 0; m < M; m += 32)
    for (int64_t n = 0; n < N; n += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      const bf16* b0 = b_packed + ((n0 + n) / kTileN) * (packed_k / kTileK) * int64_t(kTileElems);
      const bf16* b1 = b0 + (packed_k / kTileK) * int64_t(kTileElems);
      for (int64_t kc = 0; kc < kchunks; ++kc) {
        _tile_loadd(4, a + m * lda + kc * kTileK, a_stride);
        _tile_loadd(5, a + (m + 16) * lda + kc * kTileK, a_stride);
        _tile_loadd(6, b0 + kc * int64_t(kTileElems), 64);
        _tile_loadd(7, b1 + kc * int64_t(kTileElems), 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      float* cm = c + m * ldc + n;
      _tile_stored(0, cm, c_stride);
      _tile_stored(1, cm + 16, c_stride);
      _tile_stored(2, cm + 16 * ldc, c_stride);
      _tile_stored(3, cm + 16 * ldc + 16, c_stride);
    }
  _tile_release();
  if (alpha != 1.0f)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) c[m * ldc + n] *= alpha;
}

}  // namespace strata::cpu
