#include "host/engine_ops.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "host/convert.h"
#include "host/simd.h"

namespace strata::host {

namespace {
template <typename T>  // f32, bf16 or f16 destinations, 8 lanes at a time
void accumulate8(T* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) simd::store8(dst + i, _mm256_add_ps(simd::load8(dst + i), _mm256_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = from_f32<T>(to_f32(dst[i]) + src[i]);
}

template <typename T>
double chunk_squares(const T* p, int64_t lo, int64_t hi) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = lo;
  for (; i + 8 <= hi; i += 8) {
    const __m256 v = simd::load8(p + i);
    const __m256d l = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), h = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(l, l, a0);
    a1 = _mm256_fmadd_pd(h, h, a1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < hi; ++i) s += double(to_f32(p[i])) * double(to_f32(p[i]));
  return s;
}

template <typename T>
double squares(const T* p, int64_t n, bool parallel) {
  constexpr int64_t kMaxChunks = 1024;
  const int64_t chunk = std::max<int64_t>(4096, (n + kMaxChunks - 1) / kMaxChunks / 8 * 8 + 8);
  const int64_t chunks = (n + chunk - 1) / chunk;
  double partial[kMaxChunks];
#pragma omp parallel for schedule(static) if (parallel && chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) partial[c] = chunk_squares(p, c * chunk, std::min(n, c * chunk + chunk));
  double total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}
}  // namespace

void convert_accumulate(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate) {
  if (n <= 0) return;
  if (accumulate) {
    STRATA_CHECK(src_t == DType::f32, "accumulating " + std::string(dtype_name(src_t)) + " into a buffer",
                 "this is a bug: the engine accumulates f32 bucket output only");
    const float* s = static_cast<const float*>(src);
    switch (dst_t) {
      case DType::f32:
        return accumulate8(static_cast<float*>(dst), s, n);
      case DType::bf16:
        return accumulate8(static_cast<bf16*>(dst), s, n);
      case DType::f16:
        return accumulate8(static_cast<f16*>(dst), s, n);
    }
    return;
  }
  if (dst_t == src_t) {
    std::memmove(dst, src, size_t(n) * dtype_size(dst_t));
  } else if (src_t == DType::f32) {
    convert_from_f32(dst, dst_t, static_cast<const float*>(src), size_t(n));
  } else if (dst_t == DType::f32) {
    convert_to_f32(static_cast<float*>(dst), src, src_t, size_t(n));
  } else {  // 16-bit to the other 16-bit: through f32, a block at a time
    float tmp[256];
    for (int64_t i = 0; i < n; i += 256) {
      const int64_t k = std::min<int64_t>(256, n - i);
      convert_to_f32(tmp, static_cast<const char*>(src) + size_t(i) * 2, src_t, size_t(k));
      convert_from_f32(static_cast<char*>(dst) + size_t(i) * 2, dst_t, tmp, size_t(k));
    }
  }
}

double sum_squares(const void* x, DType t, int64_t n, bool parallel) {
  switch (t) {
    case DType::f32:
      return squares(static_cast<const float*>(x), n, parallel);
    case DType::bf16:
      return squares(static_cast<const bf16*>(x), n, parallel);
    case DType::f16:
      return squares(static_cast<const f16*>(x), n, parallel);
  }
  return 0;
}

}  // namespace strata::host
