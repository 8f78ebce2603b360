// Fixed-size communication buckets for reduce-scatter and all-gather, in shard coordinates.
//
// Every rank's shard is the concatenation of its slices of the sub-groups, so a range
// [lo, hi) of shard offsets names the same sub-group pieces on every rank. A bucket covers
// one such range; its buffer holds the N ranks' copies of that range back to back (rank-
// major: block r = what rank r owns of [lo, hi)). One reduce-scatter of the bucket leaves
// each rank exactly its shard[lo, hi); one all-gather of shard[lo, hi) fills the bucket.
// Buckets are cut from the top of the shard space down, because backward produces the
// last units first; each holds at most `bucket_elements` elements across all ranks.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "zero/partition.h"

namespace strata::zero {

// The part of sub-group `group` in a bucket: shard offsets [lo, hi) (within one rank's shard).
struct BucketPiece {
  int group;
  int64_t lo, hi;
};

struct Bucket {
  int64_t lo, hi;  // shard offsets covered; width() elements per rank
  std::vector<BucketPiece> pieces;
  int64_t width() const { return hi - lo; }
};

class BucketPlan {
 public:
  BucketPlan() = default;
  // bucket_elements: elements across all ranks (DeepSpeed's reduce_bucket_size); each
  // bucket's per-rank width is a multiple of the layout's alignment, at least one quantum.
  BucketPlan(const PartitionLayout& layout, int64_t bucket_elements);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t max_width() const { return max_width_; }
  // The (bucket, piece) pairs of sub-group g, in bucket order (descending shard offsets).
  struct Ref {
    int bucket, piece;
  };
  const std::vector<Ref>& refs_of_group(int g) const { return refs_[size_t(g)]; }

 private:
  std::vector<Bucket> buckets_;
  std::vector<std::vector<Ref>> refs_;
  int64_t max_width_ = 0;
};

// Enqueues on s the copies of every rank's part of `piece` from sub-group data into the
// bucket (rank-major, f32), widening 16-bit sources; padding positions become 0.
// `group_data` points at the sub-group's first element (model-flat g.flat_begin) in a
// device buffer of dtype `src_t`.
void pack_piece(Backend& be, Stream& s, const PartitionLayout& layout, const Bucket& bucket, const BucketPiece& piece,
                const void* group_data, DType src_t, float* bucket_data);

// The reverse for gathered parameters: copies (on s) every rank's part of `piece` from the
// bucket (rank-major, elements of `elem_size` bytes) to the sub-group's real positions.
void unpack_piece(Backend& be, Stream& s, const PartitionLayout& layout, const Bucket& bucket, const BucketPiece& piece,
                  const void* bucket_data, size_t elem_size, void* group_data);

// Host memory (the host optimizer's accumulators): dst[0, n) (+)= src[0, n), converting f32
// src into dst's dtype (RNE); accumulate=false overwrites. Overflow to ±Inf in 16-bit is
// detected later by the norm.
void accumulate_into(void* dst, DType dst_t, const float* src, int64_t n, bool accumulate);

// Host memory: Σ x² in f64 on the calling thread alone (host-side work must not start
// OpenMP teams that would compete with the CPU Adam's threads).
double sum_squares_serial(const void* x, DType t, int64_t n);

}  // namespace strata::zero
