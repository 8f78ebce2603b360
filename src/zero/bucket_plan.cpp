#include "zero/bucket_plan.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "host/engine_ops.h"

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

void pack_piece(Backend& be, Stream& s, const PartitionLayout& layout, const Bucket& bucket, const BucketPiece& piece,
                const void* group_data, DType src_t, float* bucket_data) {
  const SubGroup& g = layout.sub_groups()[size_t(piece.group)];
  const int64_t so = layout.shard_offset(piece.group), W = bucket.width();
  const int64_t a = piece.lo - so, len = piece.hi - piece.lo;
  const size_t esz = dtype_size(src_t);
  for (int r = 0; r < layout.world(); ++r) {
    float* dst = bucket_data + int64_t(r) * W + (piece.lo - bucket.lo);
    const int64_t begin = int64_t(r) * g.shard + a;  // padded index within the sub-group
    const int64_t real = std::clamp<int64_t>(g.count - begin, 0, len);
    if (real > 0)
      be.convert(dst, DType::f32, static_cast<const char*>(group_data) + size_t(begin) * esz, src_t, real, false, s);
    if (real < len) be.fill_zero(dst + real, size_t(len - real) * 4, s);
  }
}

void unpack_piece(Backend& be, Stream& s, const PartitionLayout& layout, const Bucket& bucket, const BucketPiece& piece,
                  const void* bucket_data, size_t elem_size, void* group_data) {
  const SubGroup& g = layout.sub_groups()[size_t(piece.group)];
  const int64_t so = layout.shard_offset(piece.group), W = bucket.width();
  const int64_t a = piece.lo - so, len = piece.hi - piece.lo;
  for (int r = 0; r < layout.world(); ++r) {
    const int64_t begin = int64_t(r) * g.shard + a;
    const int64_t real = std::clamp<int64_t>(g.count - begin, 0, len);
    if (real > 0)
      be.copy_async(static_cast<char*>(group_data) + size_t(begin) * elem_size,
                    static_cast<const char*>(bucket_data) + size_t(int64_t(r) * W + (piece.lo - bucket.lo)) * elem_size,
                    size_t(real) * elem_size, s);
  }
}

void accumulate_into(void* dst, DType dst_t, const float* src, int64_t n, bool accumulate) {
  host::convert_accumulate(dst, dst_t, src, DType::f32, n, accumulate);
}

double sum_squares_serial(const void* x, DType t, int64_t n) { return host::sum_squares(x, t, n, false); }

}  // namespace strata::zero
