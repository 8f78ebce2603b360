// ZeroEngine, part 2 of 4: gradients — hooks, buckets, reduction, and the offload pipeline
// (chunks to the host, CPU Adam, updated parameters back). Part 1 is zero_engine.cpp.
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
  step_plan_ = plan;
  speculated_ = false;
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
  const int o = out_slot_;
  if (distributed()) {
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(plan_.reduce.max_width());
    if (host_) cs().wait(*out_done_[size_t(o)]);  // its last host copy has left
    comm_->reduce_scatter(std::span<const float>(in, size_t(world_ * b.width())),
                          std::span<float>(dst, size_t(b.width())), cs());
    out = dst;
  } else if (host_) {  // one rank: the "reduction" is the bucket itself; copy it out of the slot
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(plan_.reduce.max_width());
    cs().wait(*out_done_[size_t(o)]);
    be_.copy_async(dst, in, size_t(b.width()) * 4, cs());
    out = dst;
  }
  const bool first = rounds_[size_t(k)] == 0;
  const int64_t dev_hi = std::min(b.hi, plan_.host_begin);  // the device's part of the bucket
  if (dev_hi > b.lo) {
    char* shard = static_cast<char*>(shard_grads_.data()) + size_t(b.lo) * dtype_size(grad_dtype_);
    be_.convert(shard, grad_dtype_, out, DType::f32, dev_hi - b.lo, !first, cs());
  }
  if (host_ && !plan_.bucket_chunks[size_t(k)].empty()) {
    cs().record(*reduced_);  // the host's part leaves once the reduction is done
    tiers_->d2h().wait(*reduced_);
    for (int c : plan_.bucket_chunks[size_t(k)]) offload_chunk(c, o, first, last);
    tiers_->d2h().record(*out_done_[size_t(o)]);
    out_slot_ = 1 - out_slot_;
  }
  ++rounds_[size_t(k)];
  ++stats_.buckets_reduced;
  remaining_[size_t(k)] = int64_t(world_) * b.width();
  for (int& s : slot_bucket_)
    if (s == k) s = -1;
}

// A reduced chunk's journey: device→host into a staging buffer, accumulated on the host
// (with its square sum for the norm) and, on the step's last micro-batch with speculation,
// updated by the CPU Adam with its new parameters going host→device. Each stage waits for
// the previous one by event; the staging buffer is free when the last stage is done.
void ZeroEngine::offload_chunk(int c, int o, bool first, bool last) {
  tier::TierManager& tm = *tiers_;
  const int s = acquire_staging();
  Event& ev = *stage_ev_[size_t(s)];
  const HostChunk& ch = plan_.chunks[size_t(c)];
  // The reduced gradients to the staging buffer: a copy the backend orders on the d2h stream.
  const float* src = bucket_out_.as<float>() + size_t(o) * size_t(plan_.reduce.max_width()) +
                     (ch.lo - plan_.reduce.buckets()[size_t(ch.bucket)].lo);
  be_.copy_async(tm.staging().data(s), src, size_t(ch.hi - ch.lo) * 4, tm.d2h());
  tm.count(tier::Edge::d2h, size_t(ch.hi - ch.lo) * 4);
  tm.d2h().record(ev);
  // The host work reads its task from the staging buffer's record (the buffer and its
  // record are this chunk's until the release below): captures stay at two words, inside
  // std::function (no allocation in the step).
  StageTask& task = stage_task_[size_t(s)];
  task = {};
  task.chunk = c, task.first = first, task.plan = step_plan_;
  tm.host_sum().wait(ev);
  tm.host_sum().launch_host([this, s] {
    const StageTask& t = stage_task_[size_t(s)];
    chunk_sq_[size_t(t.chunk)] =
        host_->accumulate(plan_.chunks[size_t(t.chunk)], static_cast<const float*>(tiers_->staging().data(s)), t.first);
  });
  tm.host_sum().record(ev);
  const bool update = last && host_->speculative();
  if (update) {
    tm.host().wait(ev);
    tm.host().launch_host([this, s] { host_update_work(s); });
    tm.host().record(ev);
  }
  if (update && device_compute_at(0)) copy_update_to_device(c, s, ev);
  tm.staging().release_after(s, ev);
  if (update) speculated_ = true;
}

// A host chunk's updated parameters, from staging buffer s to the device copy the gathers
// read: a backend copy on the h2d stream, after the update (ev), then ev re-recorded.
void ZeroEngine::copy_update_to_device(int c, int s, Event& ev) {
  tier::TierManager& tm = *tiers_;
  const HostChunk& h = plan_.chunks[size_t(c)];
  const size_t bytes = size_t(h.hi - h.lo) * (low_precision() ? dtype_size(buf_.compute_dtype) : 4);
  tm.h2d().wait(ev);
  be_.copy_async(device_compute_at(h.lo), tm.staging().data(s), bytes, tm.h2d());
  tm.count(tier::Edge::h2d, bytes);
  tm.h2d().record(ev);
}

// On the host stream: staging buffer s's chunk updated by the CPU Adam with its task's
// values (copying the new parameters into the buffer when the device keeps a copy), or,
// after an overflow, restored from its speculative copy-out.
void ZeroEngine::host_update_work(int s) {
  const StageTask& task = stage_task_[size_t(s)];
  const size_t c = size_t(task.chunk);
  void* staging = device_compute_at(0) ? tiers_->staging().data(s) : nullptr;
  if (task.restore)
    host_->restore(plan_.chunks[c], staging);
  else
    host_->update(plan_.chunks[c], c + 1 < plan_.chunks.size() ? &plan_.chunks[c + 1] : nullptr, task.plan.lr,
                  task.plan.grad_scale, task.plan.t, staging);
}

// The host part of the step once the norm is known: an update (not speculated, or redone
// with the real clip scale) or, after an overflow, a restore of the speculative copy-out.
void ZeroEngine::host_update_chunk(int c, float lr, float grad_scale, int64_t t, bool restore) {
  tier::TierManager& tm = *tiers_;
  const int s = acquire_staging();
  Event& ev = *stage_ev_[size_t(s)];
  StageTask& task = stage_task_[size_t(s)];
  task = {};
  task.chunk = c, task.restore = restore, task.plan = {lr, grad_scale, t};
  tm.host().launch_host([this, s] { host_update_work(s); });
  tm.host().record(ev);
  if (device_compute_at(0)) copy_update_to_device(c, s, ev);
  tm.staging().release_after(s, ev);
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
  if (host_) {  // the host's part: its chunks' square sums, in chunk order
    const auto t0 = std::chrono::steady_clock::now();
    tiers_->d2h().synchronize();
    tiers_->host_sum().synchronize();
    stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (double c : chunk_sq_) sq += c;
  }
  // One all-reduce agrees on the loss, the norm, overflow (a non-finite square sum) and stop.
  double v[4] = {host_scalars_[0] + loss_part, sq, std::isfinite(sq) ? 0.0 : 1.0, stop ? 1.0 : 0.0};
  if (distributed()) comm_->all_reduce(std::span<double>(v, 4));
  return {v[0], std::sqrt(v[1]), v[2] > 0 || !std::isfinite(v[1]), v[3] > 0};
}

}  // namespace strata::zero
