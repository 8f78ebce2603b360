// ZeroEngine, part 3 of 4: the optimizer step and parameters — publishing, stage-3 gathers,
// prefetch and release, hpZ, and the full gather for tests and export.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "cpu/convert.h"
#include "zero/footprint.h"
#include "zero/zero_engine.h"

namespace strata::zero {

// ---------------------------------------------------------------- optimizer and parameters

void ZeroEngine::step(float lr, float grad_scale, int64_t t) {
  if (host_) {
    // The host's part: speculated during backward with the step's plan. Same lr, scale and
    // t (no clipping) → keep it; otherwise redo it from the committed copy. Without
    // speculation it runs now, concurrently with the device's part below.
    const bool valid = speculated_ && lr == plan_.lr && grad_scale == plan_.grad_scale && t == plan_.t;
    if (speculated_ && !valid) {
      flush_host();
      ++stats_.speculative_redos;
    }
    if (!valid)
      for (size_t c = 0; c < chunks_.size(); ++c) host_update_chunk(int(c), lr, grad_scale, t, false);
    else
      ++stats_.speculative_commits;
  }
  if (!policy_.optimizer_states) {
    adam_->step(buf_.master, grads_full_.data(), grad_dtype_, low_precision() ? buf_.compute : nullptr,
                buf_.compute_dtype, groups_, lr, grad_scale, t);
  } else {
    adam_->step(shard_master_.as<float>(), shard_grads_.data(), grad_dtype_,
                low_precision() ? shard_compute_.data() : nullptr, buf_.compute_dtype, groups_, lr, grad_scale, t);
  }
  after_compute();  // publishing reads what the update wrote
  if (host_) {
    flush_host();
    host_->commit();
  }
  finish_step();
  if (policy_.optimizer_states && !policy_.parameters) publish_params();
  if (policy_.parameters) publish_persistent();
  // The next forward reads what was published: the compute stream waits for it (CPU: the
  // host does), not the host for the collectives.
  cs().record(*published_);
  be_.compute_stream().wait(*published_);
}

void ZeroEngine::skip_step() {
  if (host_ && speculated_) {  // undo the speculative copy-out: the committed state stands
    flush_host();
    for (size_t c = 0; c < chunks_.size(); ++c) host_update_chunk(int(c), 0, 0, 0, true);
    flush_host();
    ++stats_.speculative_discards;
  }
  finish_step();
}

void ZeroEngine::finish_step() {
  // Gathered parameters are stale after the update (and unneeded after a skipped one).
  if (policy_.parameters) {
    drain();
    for (int u = 0; u < int(resident_.size()); ++u)
      if (resident_[size_t(u)].offset >= 0) release_unit(u);
    current_unit_ = pending_release_ = -1;
    access_.end_step();
    stats_.live_param_high_water = gather_arena_.high_water();
    std::fill(secondary_valid_.begin(), secondary_valid_.end(), 0);  // hpZ: the next step gathers anew
  }
}

template <typename T>
void ZeroEngine::gather_group(const SubGroup& g, int64_t shard_off, const T* shard, T* padded_out) {
  if (distributed())
    comm_->all_gather(std::span<const T>(shard + shard_off, size_t(g.shard)),
                      std::span<T>(padded_out, size_t(g.padded)), cs());
  else
    be_.copy_async(padded_out, shard + shard_off, size_t(g.shard) * sizeof(T), cs());
}

void ZeroEngine::publish_params() {
  // Stages 1-2: every rank's full parameters become current, one all-gather bucket at a time.
  const PartitionLayout& lay = *layout_;
  const bool low = low_precision();
  const size_t esz = low ? dtype_size(buf_.compute_dtype) : 4;
  const char* shard = static_cast<const char*>(low ? shard_compute_.data() : shard_master_.data());
  char* full = static_cast<char*>(low ? buf_.compute : static_cast<void*>(buf_.master));
  char* slot = static_cast<char*>(bucket_mem_.data());
  for (const Bucket& b : ag_plan_.buckets()) {
    const size_t w = size_t(b.width());
    if (distributed()) {
      if (low)
        comm_->all_gather(std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(shard) + b.lo, w),
                          std::span<uint16_t>(reinterpret_cast<uint16_t*>(slot), w * size_t(world_)), cs());
      else
        comm_->all_gather(std::span<const float>(reinterpret_cast<const float*>(shard) + b.lo, w),
                          std::span<float>(reinterpret_cast<float*>(slot), w * size_t(world_)), cs());
    } else {
      be_.copy_async(slot, shard + size_t(b.lo) * esz, w * esz, cs());
    }
    for (const BucketPiece& piece : b.pieces)
      unpack_piece(be_, cs(), lay, b, piece, slot, esz,
                   full + size_t(lay.sub_groups()[size_t(piece.group)].flat_begin) * esz);
  }
}

void ZeroEngine::publish_persistent() {
  if (persistent_.bytes() == 0) return;
  const PartitionLayout& lay = *layout_;
  const size_t esz = dtype_size(buf_.compute_dtype);
  int64_t staged = 0;  // --offload-param: the slices come host→device first
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) {
    if (persistent_offset_[g] < 0 || !opts_.offload_param) continue;
    const int64_t off = lay.shard_offset(int(g)), n = lay.sub_groups()[g].shard;
    fetch_to_device(off, off + n, static_cast<char*>(persist_stage_.data()) + size_t(staged) * esz);
    staged += n;
  }
  if (staged > 0) {
    tiers_->h2d().record(*staged_);
    cs().wait(*staged_);
  }
  staged = 0;
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) {
    if (persistent_offset_[g] < 0) continue;
    const SubGroup& s = lay.sub_groups()[g];
    const char* shard = static_cast<const char*>(shard_source());
    int64_t off = lay.shard_offset(int(g));
    if (opts_.offload_param) {  // this rank's slice, fetched from its home in host RAM or on NVMe
      shard = static_cast<const char*>(persist_stage_.data()) + size_t(staged) * esz;
      off = 0, staged += s.shard;
    }
    if (low_precision())
      gather_group(s, off, reinterpret_cast<const uint16_t*>(shard),
                   persistent_.as<uint16_t>() + persistent_offset_[g]);
    else
      gather_group(s, off, reinterpret_cast<const float*>(shard), persistent_.as<float>() + persistent_offset_[g]);
  }
}

// Where stage 3 gathers parameters from: this rank's compute shard on the device, or with
// --offload-param its home in host RAM (the committed copy).
const void* ZeroEngine::shard_source() const {
  return low_precision() ? shard_compute_.data() : shard_master_.data();  // (offloaded: see fetch_unit)
}

void ZeroEngine::gather_unit_work(int unit, int64_t offset) {
  // Sub-groups in ascending order straight into the unit's block: a sub-group's padding
  // spills into the next one's place, which that sub-group then overwrites (the block has
  // room for the last one's padding).
  const PartitionLayout& lay = *layout_;
  const size_t esz = dtype_size(buf_.compute_dtype);
  char* dst = static_cast<char*>(gathered_mem_.data()) + offset;
  // The shard pieces: on the device, or fetched there from the host (shard offsets from the
  // unit's first).
  const char* shard = static_cast<const char*>(shard_source());
  int64_t base = 0;
  if (opts_.offload_param) {
    shard = static_cast<const char*>(fetch_mem_.data()) + fetch_off_[size_t(unit)];
    base = unit_shard_begin(unit);
  }
  // hpZ: once this step's parameters are in the secondary partition, gather within the group.
  const bool from_secondary = hpz() && secondary_valid_[size_t(unit)];
  for (int gi : unit_groups_[size_t(unit)]) {
    const SubGroup& g = lay.sub_groups()[size_t(gi)];
    char* at = dst + size_t(g.flat_begin - model_->unit_begin(unit)) * esz;
    if (g.persistent) {
      be_.copy_async(at, static_cast<const char*>(persistent_.data()) + size_t(persistent_offset_[size_t(gi)]) * esz,
                     size_t(g.count) * esz, cs());
    } else if (low_precision()) {
      gather_partitioned(gi, lay.shard_offset(gi) - base, reinterpret_cast<const uint16_t*>(shard),
                         reinterpret_cast<uint16_t*>(at), from_secondary);
    } else {
      gather_partitioned(gi, lay.shard_offset(gi) - base, reinterpret_cast<const float*>(shard),
                         reinterpret_cast<float*>(at), from_secondary);
    }
  }
  if (hpz()) secondary_valid_[size_t(unit)] = 1;
}

// Sub-group g, padded, into padded_out: across all ranks from this rank's slice at
// shard + shard_off, or with hpZ within the group from the secondary partition.
template <typename T>
void ZeroEngine::gather_partitioned(int g, int64_t shard_off, const T* shard, T* padded_out, bool from_secondary) {
  const SubGroup& s = layout_->sub_groups()[size_t(g)];
  if (!hpz()) {
    gather_group(s, shard_off, shard, padded_out);
    return;
  }
  const size_t slice = size_t(s.padded / hpz_comm_->size());
  T* mine = secondary_.as<T>() + secondary_offset_[size_t(g)];
  if (from_secondary) {
    hpz_comm_->all_gather(std::span<const T>(mine, slice), std::span<T>(padded_out, size_t(s.padded)), cs());
  } else {
    gather_group(s, shard_off, shard, padded_out);
    // Kept before the next sub-group's gather overwrites this one's padding.
    be_.copy_async(mine, padded_out + size_t(hpz_comm_->rank()) * slice, slice * sizeof(T), cs());
  }
}

int64_t ZeroEngine::unit_shard_begin(int unit) const {
  const auto& gs = unit_groups_[size_t(unit)];
  return gs.empty() ? 0 : layout_->shard_offset(gs.front());
}

int64_t ZeroEngine::unit_shard_end(int unit) const {
  const auto& gs = unit_groups_[size_t(unit)];
  return gs.empty() ? 0 : layout_->shard_offset(gs.back()) + layout_->sub_groups()[size_t(gs.back())].shard;
}

// --offload-param: the unit's shard pieces host→device (h2d stream) into the fetch arena;
// the gather on the communication stream waits for them.
void ZeroEngine::fetch_unit(int unit) {
  const size_t esz = dtype_size(buf_.compute_dtype);
  const size_t bytes = size_t(unit_shard_end(unit) - unit_shard_begin(unit)) * esz;
  int64_t off;
  while ((off = fetch_arena_.allocate(bytes)) < 0) {
    const auto t0 = std::chrono::steady_clock::now();
    STRATA_CHECK(fetch_arena_.reclaim_oldest(),
                 "stage 3: the fetched-shard arena cannot hold unit " + std::to_string(unit),
                 "this is a bug in the engine's plan");
    stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  fetch_off_[size_t(unit)] = off;
  fetch_to_device(unit_shard_begin(unit), unit_shard_end(unit), static_cast<char*>(fetch_mem_.data()) + off);
  tiers_->h2d().record(*fetched_[size_t(unit)]);
  cs().wait(*fetched_[size_t(unit)]);
}

void ZeroEngine::fetch_to_device(int64_t lo, int64_t hi, void* dst) {
  tier::TierManager& tm = *tiers_;
  const size_t esz = dtype_size(buf_.compute_dtype);
  const int64_t al = layout_->align();
  const int64_t per = std::max<int64_t>(al, int64_t(tm.staging().buffer_bytes() / esz) / al * al);
  for (int64_t a = lo; a < hi; a += per) {
    const int64_t b = std::min(hi, a + per);
    const int s = acquire_staging();
    StageTask& task = stage_task_[size_t(s)];
    task = {};
    task.lo = a, task.hi = b;
    tm.h2d().launch_host([this, s] {
      const StageTask& t = stage_task_[size_t(s)];
      host_->read_compute(t.lo, t.hi, tiers_->staging().data(s));
    });
    be_.copy_async(static_cast<char*>(dst) + size_t(a - lo) * esz, tm.staging().data(s), size_t(b - a) * esz, tm.h2d());
    tm.count(tier::Edge::h2d, size_t(b - a) * esz);
    tm.h2d().record(*stage_ev_[size_t(s)]);
    tm.staging().release_after(s, *stage_ev_[size_t(s)]);
  }
}

void ZeroEngine::release_unit(int unit) {
  Resident& r = resident_[size_t(unit)];
  gathered_[size_t(unit)]->synchronize();  // a prefetch may still be writing it
  gather_arena_.release(r.offset);
  r = {};
}

// Gathers `unit` (for `pass`) into a new block, evicting the most recently used unit not
// in use when `evict` is set and nothing fits. Returns false if there was no room.
bool ZeroEngine::gather_ahead(int unit, int pass, bool evict) {
  const size_t bytes = (size_t(model_->unit_count(unit)) + slack_elems_) * dtype_size(buf_.compute_dtype);
  int64_t off;
  while ((off = gather_arena_.allocate(bytes)) < 0) {
    if (!evict) return false;
    int victim = -1;
    for (int u = 0; u < int(resident_.size()); ++u)
      if (resident_[size_t(u)].offset >= 0 && u != current_unit_ &&
          (victim < 0 || resident_[size_t(u)].last_use > resident_[size_t(victim)].last_use))
        victim = u;
    STRATA_CHECK(victim >= 0,
                 "stage 3: the gathered-parameter arena (" + std::to_string(gather_arena_.capacity()) +
                     " bytes) cannot hold unit " + std::to_string(unit) + " (" + std::to_string(bytes) + " bytes)",
                 "raise --max-live-params, or set it to 0 to size it from --prefetch-depth");
    release_unit(victim);
  }
  resident_[size_t(unit)] = {off, pass, 0};
  if (opts_.offload_param) fetch_unit(unit);
  gather_unit_work(unit, off);
  cs().record(*gathered_[size_t(unit)]);
  if (opts_.offload_param) {
    if (stream_)
      fetch_arena_.release_after(fetch_off_[size_t(unit)], gathered_[size_t(unit)].get());
    else
      fetch_arena_.release(fetch_off_[size_t(unit)]);
  }
  return true;
}

void ZeroEngine::begin_pass() {
  access_.begin_pass();
  if (!policy_.parameters) return;
  // Each pass gathers what it uses (the paper's 3Ψ): units of earlier passes go now;
  // units prefetched for this pass stay.
  for (int u = 0; u < int(resident_.size()); ++u)
    if (resident_[size_t(u)].offset >= 0 && resident_[size_t(u)].pass < access_.pass()) release_unit(u);
  current_unit_ = pending_release_ = -1;
}

void ZeroEngine::acquire_params(int unit) {
  if (!policy_.parameters) return;
  const int64_t pos = access_.use(unit);
  const int pass = access_.pass();
  if (pending_release_ >= 0 && pending_release_ != unit && resident_[size_t(pending_release_)].offset >= 0)
    release_unit(pending_release_);  // its last use in the pass has ended
  pending_release_ = -1;
  current_unit_ = unit;
  Resident& r = resident_[size_t(unit)];
  if (r.offset < 0) {
    gather_ahead(unit, pass, true);
    ++stats_.gathers_on_demand;
  }
  resident_[size_t(unit)].last_use = ++use_clock_;
  if (access_.replaying()) {
    if (access_.last_in_pass(pos)) pending_release_ = unit;
    for (int64_t q = pos + 1; q <= pos + opts_.prefetch_depth && q < access_.size(); ++q) {
      const int v = access_.unit_at(q);
      if (resident_[size_t(v)].offset >= 0) continue;
      if (!gather_ahead(v, access_.pass_at(q), false)) break;
      ++stats_.gathers_prefetched;
    }
  }
  {
    const auto t0 = std::chrono::steady_clock::now();
    be_.compute_stream().wait(*gathered_[size_t(unit)]);  // the unit's compute starts after its gather
    stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  model_->set_unit_params(unit, static_cast<char*>(gathered_mem_.data()) + resident_[size_t(unit)].offset);
}

// ---------------------------------------------------------------- tests, export, accounting

void ZeroEngine::quiesce() {
  std::vector<Stream*> streams{stream_.get()};
  if (tiers_) streams.insert(streams.end(), {&tiers_->d2h(), &tiers_->host_sum(), &tiers_->host(), &tiers_->h2d()});
  for (Stream* s : streams)
    if (s) try {
        s->synchronize();
      } catch (const Error&) {
      }
  if (host_ && tiers_) {
    tiers_->host().launch_host([this] {
      try {
        host_->flush();
      } catch (const Error&) {
      }
    });
    tiers_->host().synchronize();
  }
}

void ZeroEngine::gather_full_params(std::span<float> out) {
  const PartitionLayout& lay = *layout_;
  STRATA_CHECK(out.size() == size_t(lay.model_elements()), "gather_full_params into " + std::to_string(out.size()),
               "the destination must hold every parameter");
  drain();
  if (!policy_.optimizer_states) {
    be_.download(out.data(), buf_.master, out.size() * 4);
    return;
  }
  wait_host();
  // This rank's master shard, from the device and (offloaded part) the host.
  std::vector<float> mine(static_cast<size_t>(lay.shard_elements()));
  if (host_begin_ > 0) be_.download(mine.data(), shard_master_.data(), size_t(host_begin_) * 4);
  if (host_ && mine.size() > size_t(host_begin_))
    host_->read_master(host_begin_, int64_t(mine.size()), mine.data() + host_begin_);
  std::vector<float> padded(static_cast<size_t>(lay.padded_elements()));
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) {  // host memory: the blocking collective
    const SubGroup& s = lay.sub_groups()[g];
    const float* from = mine.data() + lay.shard_offset(int(g));
    float* to = padded.data() + s.storage_offset;
    if (distributed())
      comm_->all_gather(std::span<const float>(from, size_t(s.shard)), std::span<float>(to, size_t(s.padded)));
    else
      std::memcpy(to, from, size_t(s.shard) * 4);
  }
  for (const SubGroup& g : lay.sub_groups())
    std::memcpy(out.data() + g.flat_begin, padded.data() + g.storage_offset, size_t(g.count) * 4);
}

}  // namespace strata::zero
