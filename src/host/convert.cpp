#include "host/convert.h"

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "host/simd.h"

namespace strata::host {

void convert_to_f32(float* dst, const void* src, DType src_t, size_t n) {
  size_t i = 0;
  if (src_t == DType::f32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  auto* s = static_cast<const uint16_t*>(src);
  if (src_t == DType::bf16) {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, simd::load8(reinterpret_cast<const bf16*>(s) + i));
    for (; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  } else {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
    for (; i < n; ++i) dst[i] = f16_to_f32(s[i]);
  }
}

void convert_from_f32(void* dst, DType dst_t, const float* src, size_t n) {
  size_t i = 0;
  if (dst_t == DType::f32) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  auto* d = static_cast<uint16_t*>(dst);
  if (dst_t == DType::bf16) {
    for (; i + 8 <= n; i += 8) simd::store8(reinterpret_cast<bf16*>(d) + i, _mm256_loadu_ps(src + i));
    for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  } else {
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
  }
}

void convert_parallel(void* dst, DType dst_t, const void* src, DType src_t, size_t n) {
  constexpr size_t kChunk = 1 << 14;
  const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    size_t off = size_t(c) * kChunk, len = std::min(kChunk, n - off);
    const char* s = static_cast<const char*>(src) + off * dtype_size(src_t);
    char* d = static_cast<char*>(dst) + off * dtype_size(dst_t);
    if (src_t == DType::f32) {
      convert_from_f32(d, dst_t, reinterpret_cast<const float*>(s), len);
    } else if (dst_t == DType::f32) {
      convert_to_f32(reinterpret_cast<float*>(d), s, src_t, len);
    } else {
      float tmp[kChunk];
      convert_to_f32(tmp, s, src_t, len);
      convert_from_f32(d, dst_t, tmp, len);
    }
  }
}

}  // namespace strata::host
