#include "zero/param_coordinator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "zero/zero_engine.h"

namespace strata::zero {

namespace {
// Runs f and adds its wall time to the compute thread's blocked time.
template <typename F>
void timed(double& blocked_s, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

ParamCoordinator::ParamCoordinator(Backend& backend, const EnginePlan& plan, const ZeroOptions& options,
                                   Communicator* comm, Communicator* hpz, Stream& work, bool own_stream,
                                   ZeroStats& stats)
    : be_(backend),
      plan_(plan),
      opts_(options),
      comm_(comm),
      hpz_(hpz),
      work_(work),
      own_stream_(own_stream),
      stats_(stats),
      staged_(backend.make_event()) {}

void ParamCoordinator::attach(UnitModel& model, const void* device_shard, Fetch fetch, Stream* fetch_stream) {
  model_ = &model;
  device_shard_ = device_shard;
  fetch_ = std::move(fetch);
  fetch_stream_ = fetch_stream;
  STRATA_CHECK(!opts_.offload_param || (fetch_ && fetch_stream_), "ParamCoordinator: --offload-param without a fetch",
               "this is a bug in the engine");
  const EngineDeviceBuffers& d = plan_.device;
  const size_t units = plan_.unit_sizes.size();
  persistent_ = allocate_planned(be_, d.persistent, "zero:persistent_params");
  gathered_mem_ = allocate_planned(be_, d.gathered, "zero:gathered_params");
  gather_arena_.reset(size_t(d.gathered), units + 1);
  resident_.assign(units, {});
  train_order_.reset(int(units));
  eval_order_.reset(int(units));
  for (size_t u = 0; u < units; ++u) gathered_.push_back(be_.make_event());
  if (hpz_) {
    secondary_ = allocate_planned(be_, d.secondary, "zero:hpz_secondary_params");
    secondary_valid_.assign(units, 0);
  }
  if (opts_.offload_param) {
    fetch_mem_ = allocate_planned(be_, d.fetched, "zero:fetched_shards");
    fetch_arena_.reset(size_t(d.fetched), units + 1);
    fetch_off_.assign(units, -1);
    for (size_t u = 0; u < units; ++u) fetched_.push_back(be_.make_event());
    persist_stage_ = allocate_planned(be_, d.persistent_staging, "zero:persistent_staging");
  }
}

void ParamCoordinator::begin_step() {
  access_->begin_step();
  current_unit_ = pending_release_ = -1;
}

void ParamCoordinator::begin_pass() {
  access_->begin_pass();
  // Each pass gathers what it uses (the paper's 3Ψ): units of earlier passes go now;
  // units prefetched for this pass stay.
  for (int u = 0; u < int(resident_.size()); ++u)
    if (resident_[size_t(u)].offset >= 0 && resident_[size_t(u)].pass < access_->pass()) release(u);
  current_unit_ = pending_release_ = -1;
}

void ParamCoordinator::acquire(int unit) {
  const int64_t pos = access_->use(unit);
  const int pass = access_->pass();
  if (pending_release_ >= 0 && pending_release_ != unit && resident_[size_t(pending_release_)].offset >= 0)
    release(pending_release_);  // its last use in the pass has ended
  pending_release_ = -1;
  current_unit_ = unit;
  if (resident_[size_t(unit)].offset < 0) {
    gather_ahead(unit, pass, true);
    ++stats_.gathers_on_demand;
  }
  resident_[size_t(unit)].last_use = ++use_clock_;
  if (access_->replaying()) {
    if (access_->last_in_pass(pos)) pending_release_ = unit;
    for (int64_t q = pos + 1; q <= pos + opts_.prefetch_depth && q < access_->size(); ++q) {
      const int v = access_->unit_at(q);
      if (resident_[size_t(v)].offset >= 0) continue;
      if (!gather_ahead(v, access_->pass_at(q), false)) break;
      ++stats_.gathers_prefetched;
    }
  }
  // The unit's compute starts after its gather.
  timed(stats_.blocked_s, [&] { be_.compute_stream().wait(*gathered_[size_t(unit)]); });
  model_->set_unit_params(unit, static_cast<char*>(gathered_mem_.data()) + resident_[size_t(unit)].offset);
}

void ParamCoordinator::end_step() {
  release_all();
  access_->end_step();
  stats_.live_param_high_water = gather_arena_.high_water();
  std::fill(secondary_valid_.begin(), secondary_valid_.end(), 0);  // hpZ: the next step gathers anew
}

void ParamCoordinator::begin_eval() {
  release_all();
  access_ = &eval_order_;
  access_->begin_step();
}

void ParamCoordinator::end_eval() {
  release_all();
  access_->end_step();
  access_ = &train_order_;
  std::fill(secondary_valid_.begin(), secondary_valid_.end(), 0);  // the next step gathers as it would have
}

void ParamCoordinator::release_all() {
  for (int u = 0; u < int(resident_.size()); ++u)
    if (resident_[size_t(u)].offset >= 0) release(u);
  current_unit_ = pending_release_ = -1;
}

void ParamCoordinator::release(int unit) {
  Resident& r = resident_[size_t(unit)];
  gathered_[size_t(unit)]->synchronize();  // a prefetch may still be writing it
  gather_arena_.release(r.offset);
  r = {};
}

// Gathers `unit` (for `pass`) into a new block, evicting the most recently used unit not
// in use when `evict` is set and nothing fits. Returns false if there was no room.
bool ParamCoordinator::gather_ahead(int unit, int pass, bool evict) {
  const size_t bytes = (size_t(model_->unit_count(unit)) + size_t(plan_.slack_elements)) * dtype_size(plan_.compute);
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
    release(victim);
  }
  resident_[size_t(unit)] = {off, pass, 0};
  if (opts_.offload_param) fetch_unit(unit);
  gather_unit_work(unit, off);
  work_.record(*gathered_[size_t(unit)]);
  if (opts_.offload_param) {
    if (own_stream_)
      fetch_arena_.release_after(fetch_off_[size_t(unit)], gathered_[size_t(unit)].get());
    else
      fetch_arena_.release(fetch_off_[size_t(unit)]);
  }
  return true;
}

// --offload-param: the unit's shard pieces host→device (fetch stream) into the fetch arena;
// the gather on the work stream waits for them.
void ParamCoordinator::fetch_unit(int unit) {
  const size_t bytes = size_t(plan_.unit_shard_end(unit) - plan_.unit_shard_begin(unit)) * dtype_size(plan_.compute);
  int64_t off;
  while ((off = fetch_arena_.allocate(bytes)) < 0) {
    bool reclaimed = false;
    timed(stats_.blocked_s, [&] { reclaimed = fetch_arena_.reclaim_oldest(); });
    STRATA_CHECK(reclaimed, "stage 3: the fetched-shard arena cannot hold unit " + std::to_string(unit),
                 "this is a bug in the engine's plan");
  }
  fetch_off_[size_t(unit)] = off;
  // Only what the gather reads: the persistent sub-groups' slices come from their own buffer.
  char* base = static_cast<char*>(fetch_mem_.data()) + off;
  const int64_t first = plan_.unit_shard_begin(unit);
  for (const auto& [a, b] : plan_.unit_fetch_runs[size_t(unit)])
    fetch_(unit, a, b, base + size_t(a - first) * dtype_size(plan_.compute));
  fetch_stream_->record(*fetched_[size_t(unit)]);
  work_.wait(*fetched_[size_t(unit)]);
}

void ParamCoordinator::gather_unit_work(int unit, int64_t offset) {
  // Sub-groups in ascending order straight into the unit's block: a sub-group's padding
  // spills into the next one's place, which that sub-group then overwrites (the block has
  // room for the last one's padding).
  const PartitionLayout& lay = plan_.layout;
  const size_t esz = dtype_size(plan_.compute);
  char* dst = static_cast<char*>(gathered_mem_.data()) + offset;
  // The shard pieces: on the device, or fetched there from the host (shard offsets from the
  // unit's first).
  const char* shard = static_cast<const char*>(device_shard_);
  int64_t base = 0;
  if (opts_.offload_param) {
    shard = static_cast<const char*>(fetch_mem_.data()) + fetch_off_[size_t(unit)];
    base = plan_.unit_shard_begin(unit);
  }
  // hpZ: once this step's parameters are in the secondary partition, gather within the group.
  const bool from_secondary = hpz_ && secondary_valid_[size_t(unit)];
  for (int gi : plan_.unit_groups[size_t(unit)]) {
    const SubGroup& g = lay.sub_groups()[size_t(gi)];
    char* at = dst + size_t(g.flat_begin - model_->unit_begin(unit)) * esz;
    if (g.persistent) {
      be_.copy_async(at,
                     static_cast<const char*>(persistent_.data()) + size_t(plan_.persistent_offset[size_t(gi)]) * esz,
                     size_t(g.count) * esz, work_);
    } else if (low_precision()) {
      gather_partitioned(gi, lay.shard_offset(gi) - base, reinterpret_cast<const uint16_t*>(shard),
                         reinterpret_cast<uint16_t*>(at), from_secondary);
    } else {
      gather_partitioned(gi, lay.shard_offset(gi) - base, reinterpret_cast<const float*>(shard),
                         reinterpret_cast<float*>(at), from_secondary);
    }
  }
  if (hpz_) secondary_valid_[size_t(unit)] = 1;
}

template <typename T>
void ParamCoordinator::gather_group(const SubGroup& g, int64_t shard_off, const T* shard, T* padded_out) {
  if (comm_)
    comm_->all_gather(std::span<const T>(shard + shard_off, size_t(g.shard)),
                      std::span<T>(padded_out, size_t(g.padded)), work_);
  else
    be_.copy_async(padded_out, shard + shard_off, size_t(g.shard) * sizeof(T), work_);
}

// Sub-group g, padded, into padded_out: across all ranks from this rank's slice at
// shard + shard_off, or with hpZ within the group from the secondary partition.
template <typename T>
void ParamCoordinator::gather_partitioned(int g, int64_t shard_off, const T* shard, T* padded_out,
                                          bool from_secondary) {
  const SubGroup& s = plan_.layout.sub_groups()[size_t(g)];
  if (!hpz_) {
    gather_group(s, shard_off, shard, padded_out);
    return;
  }
  const size_t slice = size_t(s.padded / hpz_->size());
  T* mine = secondary_.as<T>() + plan_.secondary_offset[size_t(g)];
  if (from_secondary) {
    hpz_->all_gather(std::span<const T>(mine, slice), std::span<T>(padded_out, size_t(s.padded)), work_);
  } else {
    gather_group(s, shard_off, shard, padded_out);
    // Kept before the next sub-group's gather overwrites this one's padding.
    be_.copy_async(mine, padded_out + size_t(hpz_->rank()) * slice, slice * sizeof(T), work_);
  }
}

void ParamCoordinator::publish_persistent() {
  if (persistent_.bytes() == 0) return;
  const PartitionLayout& lay = plan_.layout;
  const size_t esz = dtype_size(plan_.compute);
  int64_t staged = 0;  // --offload-param: the slices come host→device first
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) {
    if (plan_.persistent_offset[g] < 0 || !opts_.offload_param) continue;
    const int64_t off = lay.shard_offset(int(g)), n = lay.sub_groups()[g].shard;
    fetch_(-1, off, off + n, static_cast<char*>(persist_stage_.data()) + size_t(staged) * esz);
    staged += n;
  }
  if (staged > 0) {
    fetch_stream_->record(*staged_);
    work_.wait(*staged_);
  }
  staged = 0;
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) {
    if (plan_.persistent_offset[g] < 0) continue;
    const SubGroup& s = lay.sub_groups()[g];
    const char* shard = static_cast<const char*>(device_shard_);
    int64_t off = lay.shard_offset(int(g));
    if (opts_.offload_param) {  // this rank's slice, fetched from its home in host RAM or on NVMe
      shard = static_cast<const char*>(persist_stage_.data()) + size_t(staged) * esz;
      off = 0, staged += s.shard;
    }
    if (low_precision())
      gather_group(s, off, reinterpret_cast<const uint16_t*>(shard),
                   persistent_.as<uint16_t>() + plan_.persistent_offset[g]);
    else
      gather_group(s, off, reinterpret_cast<const float*>(shard), persistent_.as<float>() + plan_.persistent_offset[g]);
  }
}

}  // namespace strata::zero
