#include "zero/offload_pipeline.h"

#include <algorithm>

#include "core/error.h"

namespace strata::zero {

OffloadPipeline::OffloadPipeline(Backend& backend, tier::TierManager& tiers, const EnginePlan& plan,
                                 HostOptimizer& host, void* device_params, ZeroStats& stats)
    : be_(backend),
      tiers_(tiers),
      plan_(plan),
      host_(host),
      device_params_(device_params),
      stats_(stats),
      chunk_sq_(plan.chunks.size(), 0.0),
      reduced_(backend.make_event()) {
  for (int i = 0; i < 2; ++i) out_done_.push_back(be_.make_event());
  for (int i = 0; i < tiers_.staging().count(); ++i) stage_ev_.push_back(be_.make_event());
  stage_task_.assign(size_t(tiers_.staging().count()), {});
  if (plan.device.fetched > 0)  // --offload-param: the parameters are read where the optimizer keeps them
    fetch_ = std::make_unique<ParamFetch>(
        backend, tiers, plan, [this](int64_t lo, int64_t hi, void* dst) { host_.read_compute(lo, hi, dst); }, stats);
}

void OffloadPipeline::begin_step(const StepPlan& plan) {
  step_plan_ = plan;
  speculated_ = false;
  // Last step's update changed every parameter: the cache is read anew (the drive's copy is
  // the committed one, so a failed step leaves nothing stale behind either).
  if (fetch_) fetch_->invalidate_cache();
}

// The engine's host thread takes a staging buffer for a chunk or a fetch; the wait (every
// buffer still in the pipeline) counts as blocked time.
int OffloadPipeline::acquire_staging() {
  return count_blocked(stats_, [&] { return tiers_.staging().acquire(); });
}

void* OffloadPipeline::device_params_at(int64_t off) const {
  if (!device_params_) return nullptr;
  const size_t esz = plan_.compute != DType::f32 ? dtype_size(plan_.compute) : 4;
  return static_cast<char*>(device_params_) + size_t(off) * esz;
}

void OffloadPipeline::wait_out_slot(Stream& work) { work.wait(*out_done_[size_t(out_slot_)]); }

void OffloadPipeline::offload_bucket(int k, const float* out, Stream& work, bool first, bool last) {
  if (plan_.bucket_chunks[size_t(k)].empty()) return;
  work.record(*reduced_);  // the host's part leaves once the reduction is done
  tiers_.d2h().wait(*reduced_);
  for (int c : plan_.bucket_chunks[size_t(k)]) offload_chunk(c, out, first, last);
  tiers_.d2h().record(*out_done_[size_t(out_slot_)]);
  out_slot_ = 1 - out_slot_;
}

// A reduced chunk's journey: device→host into a staging buffer, accumulated on the host
// (with its square sum for the norm) and, on the step's last micro-batch with speculation,
// updated by the CPU Adam with its new parameters going host→device. Each stage waits for
// the previous one by event; the staging buffer is free when the last stage is done.
void OffloadPipeline::offload_chunk(int c, const float* bucket_out, bool first, bool last) {
  tier::TierManager& tm = tiers_;
  const int s = acquire_staging();
  Event& ev = *stage_ev_[size_t(s)];
  const HostChunk& ch = plan_.chunks[size_t(c)];
  // The reduced gradients to the staging buffer: a copy the backend orders on the d2h stream.
  const float* src = bucket_out + (ch.lo - plan_.reduce.buckets()[size_t(ch.bucket)].lo);
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
        host_.accumulate(plan_.chunks[size_t(t.chunk)], static_cast<const float*>(tiers_.staging().data(s)), t.first);
  });
  tm.host_sum().record(ev);
  const bool update = last && host_.speculative();
  if (update) {
    tm.host().wait(ev);
    tm.host().launch_host([this, s] { update_work(s); });
    tm.host().record(ev);
  }
  if (update && device_params_) copy_update_to_device(c, s, ev);
  tm.staging().release_after(s, ev);
  if (update) speculated_ = true;
}

// A host chunk's updated parameters, from staging buffer s to the device copy the gathers
// read: a backend copy on the h2d stream, after the update (ev), then ev re-recorded.
void OffloadPipeline::copy_update_to_device(int c, int s, Event& ev) {
  const HostChunk& h = plan_.chunks[size_t(c)];
  const size_t bytes = size_t(h.hi - h.lo) * (plan_.compute != DType::f32 ? dtype_size(plan_.compute) : 4);
  tiers_.h2d().wait(ev);
  be_.copy_async(device_params_at(h.lo), tiers_.staging().data(s), bytes, tiers_.h2d());
  tiers_.count(tier::Edge::h2d, bytes);
  tiers_.h2d().record(ev);
}

// On the host stream: staging buffer s's chunk updated by the CPU Adam with its task's
// values (copying the new parameters into the buffer when the device keeps a copy), or,
// after an overflow, restored from its speculative copy-out.
void OffloadPipeline::update_work(int s) {
  const StageTask& task = stage_task_[size_t(s)];
  const size_t c = size_t(task.chunk);
  void* staging = device_params_ ? tiers_.staging().data(s) : nullptr;
  if (task.restore)
    host_.restore(plan_.chunks[c], staging);
  else
    host_.update(plan_.chunks[c], c + 1 < plan_.chunks.size() ? &plan_.chunks[c + 1] : nullptr, task.plan.lr,
                 task.plan.grad_scale, task.plan.t, staging);
}

// The host part of the step once the norm is known: an update (not speculated, or redone
// with the real clip scale) or, after an overflow, a restore of the speculative copy-out.
void OffloadPipeline::update_chunk(int c, const StepPlan& plan, bool restore) {
  const int s = acquire_staging();
  Event& ev = *stage_ev_[size_t(s)];
  StageTask& task = stage_task_[size_t(s)];
  task = {};
  task.chunk = c, task.restore = restore, task.plan = plan;
  tiers_.host().launch_host([this, s] { update_work(s); });
  tiers_.host().record(ev);
  if (device_params_) copy_update_to_device(c, s, ev);
  tiers_.staging().release_after(s, ev);
}

double OffloadPipeline::add_square_sum(double sq) {
  count_blocked(stats_, [&] {
    tiers_.d2h().synchronize();
    tiers_.host_sum().synchronize();
  });
  for (double c : chunk_sq_) sq += c;
  return sq;
}

void OffloadPipeline::step(float lr, float grad_scale, int64_t t) {
  // Speculated during backward with the step's plan. Same lr, scale and t (no clipping) →
  // keep it; otherwise redo it from the committed copy. Without speculation it runs now,
  // concurrently with the device's part of the update.
  const bool valid = speculated_ && lr == step_plan_.lr && grad_scale == step_plan_.grad_scale && t == step_plan_.t;
  if (speculated_ && !valid) {
    flush();
    ++stats_.speculative_redos;
  }
  if (!valid)
    for (size_t c = 0; c < plan_.chunks.size(); ++c) update_chunk(int(c), {lr, grad_scale, t}, false);
  else
    ++stats_.speculative_commits;
}

void OffloadPipeline::commit() {
  flush();
  host_.commit();
}

void OffloadPipeline::skip() {
  if (!speculated_) return;
  flush();
  for (size_t c = 0; c < plan_.chunks.size(); ++c) update_chunk(int(c), {0, 0, 0}, true);
  flush();
  ++stats_.speculative_discards;
}

void OffloadPipeline::fetch_to_device(int unit, int64_t lo, int64_t hi, void* dst) { fetch_->fetch(unit, lo, hi, dst); }

void OffloadPipeline::wait() {
  count_blocked(stats_, [&] {
    for (Stream* st : tiers_.streams()) st->synchronize();
  });
}

void OffloadPipeline::flush() {
  tiers_.host().launch_host([this] { host_.flush(); });
  wait();
}

void OffloadPipeline::quiesce() {
  for (Stream* s : tiers_.streams()) try {
      s->synchronize();
    } catch (const Error&) {
    }
  tiers_.host().launch_host([this] {
    try {
      host_.flush();
    } catch (const Error&) {
    }
  });
  tiers_.host().synchronize();
}

}  // namespace strata::zero
