#include "zero/bucket_plan.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "cpu/convert.h"
#include "cpu/simd.h"

namespace strata::zero {

BucketPlan::BucketPlan(const PartitionLayout& layout, int64_t bucket_elements) {
  STRATA_CHECK(bucket_elements > 0, "bucket size " + std::to_string(bucket_elements),
               "--reduce-bucket-size and --allgather-bucket-size must be positive");
  const int64_t N = layout.world(), align = layout.align(), S = layout.shard_elements();
  const int64_t width = std::max(align, bucket_elements / N / align * align);
  const auto& groups = layout.sub_groups();
  refs_.assign(groups.size(), {});
  for (int64_t hi = S; hi > 0;) {
    const int64_t lo = std::max<int64_t>(0, hi - width);
    Bucket b{lo, hi, {}};
    for (int g = int(groups.size()) - 1; g >= 0; --g) {
      const int64_t so = layout.shard_offset(g), se = so + groups[size_t(g)].shard;
      const int64_t plo = std::max(lo, so), phi = std::min(hi, se);
      if (phi <= plo) continue;
      refs_[size_t(g)].push_back({int(buckets_.size()), int(b.pieces.size())});
      b.pieces.push_back({g, plo, phi});
    }
    max_width_ = std::max(max_width_, b.width());
    buckets_.push_back(std::move(b));
    hi = lo;
  }
}

void pack_piece(const PartitionLayout& layout, const Bucket& bucket, const BucketPiece& piece, const void* group_data,
                DType src_t, float* bucket_data) {
  const SubGroup& g = layout.sub_groups()[size_t(piece.group)];
  const int64_t so = layout.shard_offset(piece.group), W = bucket.width();
  const int64_t a = piece.lo - so, len = piece.hi - piece.lo;
  const size_t esz = dtype_size(src_t);
  for (int r = 0; r < layout.world(); ++r) {
    float* dst = bucket_data + int64_t(r) * W + (piece.lo - bucket.lo);
    const int64_t begin = int64_t(r) * g.shard + a;  // padded index within the sub-group
    const int64_t real = std::clamp<int64_t>(g.count - begin, 0, len);
    if (real > 0)
      cpu::convert_to_f32(dst, static_cast<const char*>(group_data) + size_t(begin) * esz, src_t, size_t(real));
    if (real < len) std::memset(dst + real, 0, size_t(len - real) * 4);
  }
}

void unpack_piece(const PartitionLayout& layout, const Bucket& bucket, const BucketPiece& piece,
                  const void* bucket_data, size_t elem_size, void* group_data) {
  const SubGroup& g = layout.sub_groups()[size_t(piece.group)];
  const int64_t so = layout.shard_offset(piece.group), W = bucket.width();
  const int64_t a = piece.lo - so, len = piece.hi - piece.lo;
  for (int r = 0; r < layout.world(); ++r) {
    const int64_t begin = int64_t(r) * g.shard + a;
    const int64_t real = std::clamp<int64_t>(g.count - begin, 0, len);
    if (real > 0)
      std::memcpy(static_cast<char*>(group_data) + size_t(begin) * elem_size,
                  static_cast<const char*>(bucket_data) + size_t(int64_t(r) * W + (piece.lo - bucket.lo)) * elem_size,
                  size_t(real) * elem_size);
  }
}

namespace {
template <typename T>  // f32, bf16 or f16 destinations, 8 lanes at a time
void accumulate16(T* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    cpu::simd::store8(dst + i, _mm256_add_ps(cpu::simd::load8(dst + i), _mm256_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = from_f32<T>(to_f32(dst[i]) + src[i]);
}
}  // namespace

void accumulate_into(void* dst, DType dst_t, const float* src, int64_t n, bool accumulate) {
  if (!accumulate) {
    cpu::convert_from_f32(dst, dst_t, src, size_t(n));
    return;
  }
  switch (dst_t) {
    case DType::f32:
      return accumulate16(static_cast<float*>(dst), src, n);
    case DType::bf16:
      return accumulate16(static_cast<bf16*>(dst), src, n);
    case DType::f16:
      return accumulate16(static_cast<f16*>(dst), src, n);
  }
}

namespace {
template <typename T>
double sum_squares_of(const T* p, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = cpu::simd::load8(p + i);
    const __m256d l = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), h = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(l, l, a0);
    a1 = _mm256_fmadd_pd(h, h, a1);
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(a0, a1));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) s += double(to_f32(p[i])) * double(to_f32(p[i]));
  return s;
}
}  // namespace

double sum_squares_serial(const void* x, DType t, int64_t n) {
  switch (t) {
    case DType::f32:
      return sum_squares_of(static_cast<const float*>(x), n);
    case DType::bf16:
      return sum_squares_of(static_cast<const bf16*>(x), n);
    case DType::f16:
      return sum_squares_of(static_cast<const f16*>(x), n);
  }
  return 0;
}

}  // namespace strata::zero
