// ZeroEngine, part 2 of 4: gradients — hooks, buckets and their reduction, handing each
// reduced bucket's host part to the OffloadPipeline. Part 1 is zero_engine.cpp.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "zero/zero_engine.h"

namespace strata::zero {

// ---------------------------------------------------------------- gradients

float* ZeroEngine::bucket_slot(int bucket) {
  for (int s = 0; s < plan_.bucket_slots; ++s)
    if (slot_bucket_[s] == bucket) return bucket_mem_.as<float>() + s * plan_.bucket_slot_elements;
  for (int s = 0; s < plan_.bucket_slots; ++s)
    if (slot_bucket_[s] < 0) {
      slot_bucket_[s] = bucket;
      return bucket_mem_.as<float>() + s * plan_.bucket_slot_elements;
    }
  throw_error("gradient buckets completed out of order: a bucket was started while every slot held an incomplete one",
              "raise --reduce-bucket-size (the model's backward does not produce units in layout order)");
}

void ZeroEngine::begin_step(const StepPlan& plan) {
  if (offload_) offload_->begin_step(plan);
  last_micro_ = true;
  Stream& compute = be_.compute_stream();
  be_.fill_zero(scalars_.data(), scalars_.bytes(), compute);
  if (plan_.direct_grads) be_.fill_zero(grads_full_.data(), grads_full_.bytes(), compute);
  std::fill(opens_.begin(), opens_.end(), 0);
  std::fill(rounds_.begin(), rounds_.end(), 0);
  if (params_) params_->begin_step();
}

void ZeroEngine::open_grads(int unit) {
  ++opens_[size_t(unit)];
  if (plan_.direct_grads) {  // f32, stages 0-1: accumulate straight into the full gradients
    model_->set_unit_grads(unit, grads_full_.as<float>() + model_->unit_begin(unit));
    return;
  }
  const size_t bytes = size_t(model_->unit_count(unit)) * 4;
  int64_t off;
  const auto t_wait = std::chrono::steady_clock::now();
  while ((off = grad_arena_.allocate(bytes)) < 0)
    STRATA_CHECK(grad_arena_.reclaim_oldest(),
                 "gradient scratch of " + std::to_string(grad_arena_.capacity()) + " bytes cannot hold unit " +
                     std::to_string(unit) + " (" + std::to_string(bytes) +
                     " bytes) with the units still open: " + grad_arena_.describe(),
                 "this is a bug in the engine's plan");
  stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t_wait).count();
  grad_block_[size_t(unit)] = off;
  float* scratch = reinterpret_cast<float*>(static_cast<char*>(grad_scratch_mem_.data()) + off);
  be_.fill_zero(scratch, bytes, be_.compute_stream());
  model_->set_unit_grads(unit, scratch);
}

void ZeroEngine::close_grads(int unit) {
  if (plan_.direct_grads) return;
  const int64_t off = grad_block_[size_t(unit)];
  const bool first = opens_[size_t(unit)] == 1;
  after_compute();  // the unit's backward has written its scratch
  if (policy_.gradients)
    reduce_unit_work(unit, off, last_micro_);
  else
    close_unit_work(unit, off, first);
  if (stream_) {
    stream_->record(*grad_done_[size_t(unit)]);
    grad_arena_.release_after(off, grad_done_[size_t(unit)].get());
  } else {
    grad_arena_.release(off);
  }
}

void ZeroEngine::close_unit_work(int unit, int64_t scratch_offset, bool first) {
  const float* scratch =
      reinterpret_cast<const float*>(static_cast<const char*>(grad_scratch_mem_.data()) + scratch_offset);
  char* dst = static_cast<char*>(grads_full_.data()) + size_t(model_->unit_begin(unit)) * dtype_size(grad_dtype_);
  be_.convert(dst, grad_dtype_, scratch, DType::f32, model_->unit_count(unit), !first, cs());
}

void ZeroEngine::reduce_unit_work(int unit, int64_t scratch_offset, bool last) {
  const PartitionLayout& lay = plan_.layout;
  const float* scratch =
      reinterpret_cast<const float*>(static_cast<const char*>(grad_scratch_mem_.data()) + scratch_offset);
  const auto& groups = plan_.unit_groups[size_t(unit)];
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {  // descending shard offsets, like the buckets
    const SubGroup& g = lay.sub_groups()[size_t(*it)];
    for (const BucketPlan::Ref& ref : plan_.reduce.refs_of_group(*it)) {
      const Bucket& b = plan_.reduce.buckets()[size_t(ref.bucket)];
      const BucketPiece& piece = b.pieces[size_t(ref.piece)];
      pack_piece(be_, cs(), lay, b, piece, scratch + (g.flat_begin - model_->unit_begin(unit)), DType::f32,
                 bucket_slot(ref.bucket));
      remaining_[size_t(ref.bucket)] -= int64_t(world_) * (piece.hi - piece.lo);
      if (remaining_[size_t(ref.bucket)] == 0) reduce_bucket(ref.bucket, last);
    }
  }
}

void ZeroEngine::reduce_bucket(int k, bool last) {
  const Bucket& b = plan_.reduce.buckets()[size_t(k)];
  float* in = bucket_slot(k);
  const float* out = in;
  const int o = offload_ ? offload_->out_slot() : 0;
  if (distributed()) {
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(plan_.reduce.max_width());
    if (offload_) offload_->wait_out_slot(cs());  // its last host copy has left
    comm_->reduce_scatter(std::span<const float>(in, size_t(world_ * b.width())),
                          std::span<float>(dst, size_t(b.width())), cs());
    out = dst;
  } else if (offload_) {  // one rank: the "reduction" is the bucket itself; copy it out of the slot
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(plan_.reduce.max_width());
    offload_->wait_out_slot(cs());
    be_.copy_async(dst, in, size_t(b.width()) * 4, cs());
    out = dst;
  }
  const bool first = rounds_[size_t(k)] == 0;
  const int64_t dev_hi = std::min(b.hi, plan_.host_begin);  // the device's part of the bucket
  if (dev_hi > b.lo) {
    char* shard = static_cast<char*>(shard_grads_.data()) + size_t(b.lo) * dtype_size(grad_dtype_);
    be_.convert(shard, grad_dtype_, out, DType::f32, dev_hi - b.lo, !first, cs());
  }
  if (offload_) offload_->offload_bucket(k, out, cs(), first, last);  // the host's part of the bucket
  ++rounds_[size_t(k)];
  ++stats_.buckets_reduced;
  remaining_[size_t(k)] = int64_t(world_) * b.width();
  for (int& s : slot_bucket_)
    if (s == k) s = -1;
}

void ZeroEngine::reduce_stage0() {
  if (!distributed()) return;
  const int64_t n = plan_.layout.model_elements();
  if (!low_precision()) {
    const int64_t chunk = std::max<int64_t>(1, opts_.reduce_bucket_size);
    for (int64_t i = 0; i < n; i += chunk)
      comm_->all_reduce(std::span<float>(grads_full_.as<float>() + i, size_t(std::min(chunk, n - i))), ReduceOp::sum,
                        cs());
    return;
  }
  float* staging = bucket_mem_.as<float>();
  char* g = static_cast<char*>(grads_full_.data());
  const size_t gsz = dtype_size(grad_dtype_);
  for (int64_t i = 0; i < n; i += plan_.bucket_slot_elements) {
    const int64_t len = std::min(plan_.bucket_slot_elements, n - i);
    be_.convert(staging, DType::f32, g + size_t(i) * gsz, grad_dtype_, len, false, cs());
    comm_->all_reduce(std::span<float>(staging, size_t(len)), ReduceOp::sum, cs());
    be_.convert(g + size_t(i) * gsz, grad_dtype_, staging, DType::f32, len, false, cs());
  }
}

void ZeroEngine::reduce_stage1() {
  // The full gradients are complete: pack each bucket from them and reduce-scatter it.
  const PartitionLayout& lay = plan_.layout;
  const size_t gsz = dtype_size(grad_dtype_);
  for (size_t k = 0; k < plan_.reduce.buckets().size(); ++k) {
    const Bucket& b = plan_.reduce.buckets()[k];
    float* slot = bucket_slot(int(k));
    for (const BucketPiece& piece : b.pieces)
      pack_piece(
          be_, cs(), lay, b, piece,
          static_cast<const char*>(grads_full_.data()) + size_t(lay.sub_groups()[size_t(piece.group)].flat_begin) * gsz,
          grad_dtype_, slot);
    reduce_bucket(int(k), true);
  }
}

ReducedStep ZeroEngine::reduce_gradients(double loss_part, bool stop) {
  after_compute();
  if (!policy_.optimizer_states) reduce_stage0();
  if (policy_.optimizer_states && !policy_.gradients) reduce_stage1();
  drain();  // every bucket reduced, every 16-bit close accumulated
  for (size_t k = 0; k < remaining_.size(); ++k)
    STRATA_CHECK(!policy_.gradients || rounds_[k] > 0 || plan_.reduce.buckets()[k].width() == 0,
                 "gradient bucket " + std::to_string(k) + " was never reduced this step",
                 "the model did not close every unit's gradients; this is a bug in the model's hooks");
  // The device's square sum into its scalar, on the compute stream (cs() is drained).
  Stream& compute = be_.compute_stream();
  double* sq_dev = scalars_.as<double>() + 1;
  if (!policy_.optimizer_states) {
    // Every rank holds the same reduced gradients: each sums the squares of its 1/N.
    const int64_t n = plan_.layout.model_elements(), lo = n * rank_ / world_, hi = n * (rank_ + 1) / world_;
    be_.sum_squares(sq_dev, static_cast<char*>(grads_full_.data()) + size_t(lo) * dtype_size(grad_dtype_), grad_dtype_,
                    hi - lo, false, compute);
  } else {
    be_.sum_squares(sq_dev, shard_grads_.data(), grad_dtype_, plan_.host_begin, false, compute);
  }
  // The step's one read-back: loss and square sum.
  be_.copy_async(host_scalars_, scalars_.data(), 2 * sizeof(double), compute);
  compute.synchronize();
  double sq = host_scalars_[1];
  if (offload_) sq = offload_->add_square_sum(sq);  // the host's part: its chunks' square sums, in chunk order
  // One all-reduce agrees on the loss, the norm, overflow (a non-finite square sum) and stop.
  double v[4] = {host_scalars_[0] + loss_part, sq, std::isfinite(sq) ? 0.0 : 1.0, stop ? 1.0 : 0.0};
  if (distributed()) comm_->all_reduce(std::span<double>(v, 4));
  return {v[0], std::sqrt(v[1]), v[2] > 0 || !std::isfinite(v[1]), v[3] > 0};
}

}  // namespace strata::zero
