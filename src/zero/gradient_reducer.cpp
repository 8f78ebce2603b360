#include "zero/gradient_reducer.h"

#include <algorithm>

#include "core/error.h"

namespace strata::zero {

GradientReducer::GradientReducer(Backend& backend, const EnginePlan& plan, const ZeroOptions& options,
                                 Communicator* comm, int rank, Stream& work, bool own_stream, OffloadPipeline* offload,
                                 ZeroStats& stats)
    : be_(backend),
      plan_(plan),
      opts_(options),
      comm_(comm),
      rank_(rank),
      work_(work),
      own_stream_(own_stream),
      offload_(offload),
      stats_(stats),
      compute_done_(backend.make_event()) {}

void GradientReducer::attach(UnitModel& model) {
  model_ = &model;
  const EngineDeviceBuffers& d = plan_.device;
  grads_full_ = allocate_planned(be_, d.grads_full, "grads:full", true);
  shard_grads_ = allocate_planned(be_, d.grad_shard, "zero:grad_shard", true);
  bucket_out_ = allocate_planned(be_, d.bucket_out, "zero:bucket_out");
  bucket_mem_ = allocate_planned(be_, d.buckets, "zero:buckets");
  grad_scratch_mem_ = allocate_planned(be_, d.grad_scratch, "zero:grad_scratch");
  const size_t units = plan_.unit_sizes.size();
  if (d.grad_scratch > 0) grad_arena_.reset(size_t(d.grad_scratch), units + 1);
  remaining_.assign(plan_.reduce.buckets().size(), 0);
  rounds_.assign(plan_.reduce.buckets().size(), 0);
  for (size_t k = 0; k < remaining_.size(); ++k) remaining_[k] = plan_.world * plan_.reduce.buckets()[k].width();
  opens_.assign(units, 0);
  grad_block_.assign(units, -1);
  for (size_t u = 0; u < units; ++u) grad_done_.push_back(be_.make_event());
}

void GradientReducer::after_compute() {
  if (!own_stream_) return;  // the work stream is the compute stream itself
  be_.compute_stream().record(*compute_done_);
  work_.wait(*compute_done_);
}

void GradientReducer::begin_step() {
  last_micro_ = true;
  if (plan_.direct_grads) be_.fill_zero(grads_full_.data(), grads_full_.bytes(), be_.compute_stream());
  std::fill(opens_.begin(), opens_.end(), 0);
  std::fill(rounds_.begin(), rounds_.end(), 0);
}

float* GradientReducer::bucket_slot(int bucket) {
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

void GradientReducer::open(int unit) {
  ++opens_[size_t(unit)];
  if (plan_.direct_grads) {  // f32, stages 0-1: accumulate straight into the full gradients
    model_->set_unit_grads(unit, grads_full_.as<float>() + model_->unit_begin(unit));
    return;
  }
  const size_t bytes = size_t(model_->unit_count(unit)) * 4;
  int64_t off;
  count_blocked(stats_, [&] {
    while ((off = grad_arena_.allocate(bytes)) < 0)
      STRATA_CHECK(grad_arena_.reclaim_oldest(),
                   "gradient scratch of " + std::to_string(grad_arena_.capacity()) + " bytes cannot hold unit " +
                       std::to_string(unit) + " (" + std::to_string(bytes) +
                       " bytes) with the units still open: " + grad_arena_.describe(),
                   "this is a bug in the engine's plan");
  });
  grad_block_[size_t(unit)] = off;
  float* scratch = reinterpret_cast<float*>(static_cast<char*>(grad_scratch_mem_.data()) + off);
  be_.fill_zero(scratch, bytes, be_.compute_stream());
  model_->set_unit_grads(unit, scratch);
}

void GradientReducer::close(int unit) {
  if (plan_.direct_grads) return;
  const int64_t off = grad_block_[size_t(unit)];
  const bool first = opens_[size_t(unit)] == 1;
  after_compute();  // the unit's backward has written its scratch
  if (plan_.policy.gradients)
    reduce_unit_work(unit, off, last_micro_);
  else
    close_unit_work(unit, off, first);
  if (own_stream_) {
    work_.record(*grad_done_[size_t(unit)]);
    grad_arena_.release_after(off, grad_done_[size_t(unit)].get());
  } else {
    grad_arena_.release(off);
  }
}

void GradientReducer::close_unit_work(int unit, int64_t scratch_offset, bool first) {
  const float* scratch =
      reinterpret_cast<const float*>(static_cast<const char*>(grad_scratch_mem_.data()) + scratch_offset);
  char* dst = static_cast<char*>(grads_full_.data()) + size_t(model_->unit_begin(unit)) * dtype_size(plan_.compute);
  be_.convert(dst, plan_.compute, scratch, DType::f32, model_->unit_count(unit), !first, work_);
}

void GradientReducer::reduce_unit_work(int unit, int64_t scratch_offset, bool last) {
  const PartitionLayout& lay = plan_.layout;
  const float* scratch =
      reinterpret_cast<const float*>(static_cast<const char*>(grad_scratch_mem_.data()) + scratch_offset);
  const auto& groups = plan_.unit_groups[size_t(unit)];
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {  // descending shard offsets, like the buckets
    const SubGroup& g = lay.sub_groups()[size_t(*it)];
    for (const BucketPlan::Ref& ref : plan_.reduce.refs_of_group(*it)) {
      const Bucket& b = plan_.reduce.buckets()[size_t(ref.bucket)];
      const BucketPiece& piece = b.pieces[size_t(ref.piece)];
      pack_piece(be_, work_, lay, b, piece, scratch + (g.flat_begin - model_->unit_begin(unit)), DType::f32,
                 bucket_slot(ref.bucket));
      remaining_[size_t(ref.bucket)] -= int64_t(plan_.world) * (piece.hi - piece.lo);
      if (remaining_[size_t(ref.bucket)] == 0) reduce_bucket(ref.bucket, last);
    }
  }
}

void GradientReducer::reduce_bucket(int k, bool last) {
  const Bucket& b = plan_.reduce.buckets()[size_t(k)];
  float* in = bucket_slot(k);
  const float* out = in;
  const int o = offload_ ? offload_->out_slot() : 0;
  if (comm_) {
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(plan_.reduce.max_width());
    if (offload_) offload_->wait_out_slot(work_);  // its last host copy has left
    comm_->reduce_scatter(std::span<const float>(in, size_t(plan_.world * b.width())),
                          std::span<float>(dst, size_t(b.width())), work_);
    out = dst;
  } else if (offload_) {  // one rank: the "reduction" is the bucket itself; copy it out of the slot
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(plan_.reduce.max_width());
    offload_->wait_out_slot(work_);
    be_.copy_async(dst, in, size_t(b.width()) * 4, work_);
    out = dst;
  }
  const bool first = rounds_[size_t(k)] == 0;
  const int64_t dev_hi = std::min(b.hi, plan_.host_begin);  // the device's part of the bucket
  if (dev_hi > b.lo) {
    char* shard = static_cast<char*>(shard_grads_.data()) + size_t(b.lo) * dtype_size(plan_.compute);
    be_.convert(shard, plan_.compute, out, DType::f32, dev_hi - b.lo, !first, work_);
  }
  if (offload_) offload_->offload_bucket(k, out, work_, first, last);  // the host's part of the bucket
  ++rounds_[size_t(k)];
  ++stats_.buckets_reduced;
  remaining_[size_t(k)] = int64_t(plan_.world) * b.width();
  for (int& s : slot_bucket_)
    if (s == k) s = -1;
}

void GradientReducer::reduce_stage0() {
  if (!comm_) return;
  const int64_t n = plan_.layout.model_elements();
  if (!low_precision()) {
    const int64_t chunk = std::max<int64_t>(1, opts_.reduce_bucket_size);
    for (int64_t i = 0; i < n; i += chunk)
      comm_->all_reduce(std::span<float>(grads_full_.as<float>() + i, size_t(std::min(chunk, n - i))), ReduceOp::sum,
                        work_);
    return;
  }
  float* staging = bucket_mem_.as<float>();
  char* g = static_cast<char*>(grads_full_.data());
  const size_t gsz = dtype_size(plan_.compute);
  for (int64_t i = 0; i < n; i += plan_.bucket_slot_elements) {
    const int64_t len = std::min(plan_.bucket_slot_elements, n - i);
    be_.convert(staging, DType::f32, g + size_t(i) * gsz, plan_.compute, len, false, work_);
    comm_->all_reduce(std::span<float>(staging, size_t(len)), ReduceOp::sum, work_);
    be_.convert(g + size_t(i) * gsz, plan_.compute, staging, DType::f32, len, false, work_);
  }
}

void GradientReducer::reduce_stage1() {
  // The full gradients are complete: pack each bucket from them and reduce-scatter it.
  const PartitionLayout& lay = plan_.layout;
  const size_t gsz = dtype_size(plan_.compute);
  for (size_t k = 0; k < plan_.reduce.buckets().size(); ++k) {
    const Bucket& b = plan_.reduce.buckets()[k];
    float* slot = bucket_slot(int(k));
    for (const BucketPiece& piece : b.pieces)
      pack_piece(
          be_, work_, lay, b, piece,
          static_cast<const char*>(grads_full_.data()) + size_t(lay.sub_groups()[size_t(piece.group)].flat_begin) * gsz,
          plan_.compute, slot);
    reduce_bucket(int(k), true);
  }
}

void GradientReducer::reduce_after_backward() {
  after_compute();
  if (!plan_.policy.optimizer_states) reduce_stage0();
  if (plan_.policy.optimizer_states && !plan_.policy.gradients) reduce_stage1();
}

void GradientReducer::check_complete() const {
  for (size_t k = 0; k < remaining_.size(); ++k)
    STRATA_CHECK(!plan_.policy.gradients || rounds_[k] > 0 || plan_.reduce.buckets()[k].width() == 0,
                 "gradient bucket " + std::to_string(k) + " was never reduced this step",
                 "the model did not close every unit's gradients; this is a bug in the model's hooks");
}

void GradientReducer::square_sum(double* sq, Stream& stream) {
  if (!plan_.policy.optimizer_states) {
    // Every rank holds the same reduced gradients: each sums the squares of its 1/N.
    const int64_t n = plan_.layout.model_elements(), lo = n * rank_ / plan_.world, hi = n * (rank_ + 1) / plan_.world;
    be_.sum_squares(sq, static_cast<char*>(grads_full_.data()) + size_t(lo) * dtype_size(plan_.compute), plan_.compute,
                    hi - lo, false, stream);
  } else {
    be_.sum_squares(sq, shard_grads_.data(), plan_.compute, plan_.host_begin, false, stream);
  }
}

}  // namespace strata::zero
