#include "zero/zero_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "cpu/convert.h"
#include "zero/footprint.h"

namespace strata::zero {

StagePolicy StagePolicy::for_stage(int stage) {
  STRATA_CHECK(stage >= 0 && stage <= 3, "--zero-stage " + std::to_string(stage), "stages are 0, 1, 2 and 3");
  return {stage >= 1, stage >= 2, stage >= 3};
}

ZeroEngine::ZeroEngine(Backend& backend, Communicator* comm, ZeroOptions options, AdamWConfig adam,
                       tier::TierManager* tiers)
    : be_(backend),
      comm_(comm),
      tiers_(tiers),
      opts_(options),
      rank_(comm ? comm->rank() : 0),
      world_(comm ? comm->size() : 1),
      policy_(StagePolicy::for_stage(options.stage)),
      adam_cfg_(adam) {
  STRATA_CHECK(opts_.reduce_bucket_size > 0, "--reduce-bucket-size " + std::to_string(opts_.reduce_bucket_size),
               "must be a positive number of elements");
  STRATA_CHECK(opts_.allgather_bucket_size > 0,
               "--allgather-bucket-size " + std::to_string(opts_.allgather_bucket_size),
               "must be a positive number of elements");
  STRATA_CHECK(opts_.prefetch_depth >= 0, "--prefetch-depth " + std::to_string(opts_.prefetch_depth),
               "must be 0 or more units");
  STRATA_CHECK(opts_.param_persistence_threshold >= 0,
               "--param-persistence-threshold " + std::to_string(opts_.param_persistence_threshold),
               "must be 0 or more elements");
  STRATA_CHECK(opts_.max_live_params >= 0, "--max-live-params " + std::to_string(opts_.max_live_params),
               "must be 0 (automatic) or a number of elements");
  STRATA_CHECK(!opts_.offload_optimizer || policy_.optimizer_states,
               "--offload-optimizer cpu with --zero-stage " + std::to_string(opts_.stage),
               "offloading the optimizer needs its states partitioned: use --zero-stage 1, 2 or 3");
  STRATA_CHECK(!opts_.offload_param || policy_.parameters,
               "--offload-param cpu with --zero-stage " + std::to_string(opts_.stage),
               "parameters are offloaded where they are partitioned: use --zero-stage 3");
  STRATA_CHECK(!opts_.offload_param || (opts_.offload_optimizer && opts_.offload_ratio == 1.0),
               "--offload-param cpu without the whole optimizer on the host",
               "add --offload-optimizer cpu (and --offload-ratio 1): the parameters' updates are made on the host");
  STRATA_CHECK(opts_.offload_ratio >= 0 && opts_.offload_ratio <= 1,
               "--offload-ratio " + std::to_string(opts_.offload_ratio), "give a fraction between 0 and 1");
  STRATA_CHECK(!(opts_.offload_optimizer || opts_.offload_param) || tiers_,
               "ZeroEngine: offload without a tier manager", "this is a bug in the caller");
  const int K = opts_.hpz_partition_size;
  STRATA_CHECK(K >= 1 && world_ % K == 0,
               "--hpz-partition-size " + std::to_string(K) + " with " + std::to_string(world_) + " ranks",
               "give a number of ranks that divides the world size (usually the ranks per node), or 1 for none");
  STRATA_CHECK(K == 1 || policy_.parameters,
               "--hpz-partition-size " + std::to_string(K) + " at stage " + std::to_string(opts_.stage),
               "the secondary partition is of stage-3 parameters: use --zero-stage 3");
  STRATA_CHECK(K == 1 || !opts_.offload_param, "--hpz-partition-size with --offload-param",
               "the secondary partition lives on the device beside gathered parameters; drop one of the two");
  if (opts_.overlap_comm) stream_ = be_.make_stream("zero:comm");
  // Groups of K consecutive ranks: with ranks placed node by node, a group is (part of) a node.
  if (K > 1 && distributed()) hpz_comm_ = comm_->split(rank_ / K);
}

ZeroEngine::~ZeroEngine() {
  // Queued work on every stream the engine used refers to it: let it finish before the
  // engine goes (on the error path too; the errors were reported already).
  auto drain_quietly = [](Stream* st) {
    if (st) try {
        st->synchronize();
      } catch (...) {
      }
  };
  drain_quietly(stream_.get());
  if (tiers_) {
    drain_quietly(&tiers_->d2h());
    drain_quietly(&tiers_->host_sum());
    drain_quietly(&tiers_->host());
    drain_quietly(&tiers_->h2d());
  }
}

template <typename F>
void ZeroEngine::submit(F&& work) {
  if (stream_)
    stream_->launch_host(std::forward<F>(work));
  else
    work();
}

void ZeroEngine::drain() {
  if (!stream_) return;
  const auto t0 = std::chrono::steady_clock::now();
  stream_->synchronize();
  stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Waits, on the compute thread, for the host side's queued work (copies, CPU Adam).
void ZeroEngine::wait_host() {
  if (!tiers_) return;
  const auto t0 = std::chrono::steady_clock::now();
  tiers_->d2h().synchronize();
  tiers_->host_sum().synchronize();
  tiers_->host().synchronize();
  tiers_->h2d().synchronize();
  stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void ZeroEngine::flush_host() {
  if (!host_) return;
  tiers_->host().launch_host([this] { host_->flush(); });
  wait_host();
}

void* ZeroEngine::device_compute_at(int64_t off) {
  // Where an updated host chunk goes on the device: the compute shard (16-bit runs), or the
  // f32 master mirror that stages 1-3 gather from in f32 runs; nothing with --offload-param.
  if (opts_.offload_param) return nullptr;
  if (low_precision()) return static_cast<char*>(shard_compute_.data()) + size_t(off) * dtype_size(buf_.compute_dtype);
  return shard_master_.as<float>() + off;
}

void ZeroEngine::attach(UnitModel& model, ModelBuffers buffers, uint64_t seed, const FlatSource* init) {
  model_ = &model;
  buf_ = std::move(buffers);
  STRATA_CHECK(buf_.weight_decay.size() == buf_.params.size(), "ZeroEngine: one weight-decay flag per parameter",
               "this is a bug in the caller");
  STRATA_CHECK(policy_.parameters || buf_.master || buf_.compute,
               "ZeroEngine: stage " + std::to_string(opts_.stage) + " needs the model's parameters",
               "this is a bug in the caller");
  STRATA_CHECK(policy_.optimizer_states || buf_.master, "ZeroEngine: stage 0 needs the model's f32 master parameters",
               "this is a bug in the caller");
  grad_dtype_ = buf_.compute_dtype;
  const size_t gsz = dtype_size(grad_dtype_), esz = dtype_size(buf_.compute_dtype);
  const size_t device_before = be_.budget().used(), host_before = tiers_ ? tiers_->budget(Tier::host).used() : 0;
  // Persistence only matters where parameters are partitioned; elsewhere it would only cut
  // sub-groups smaller.
  for (ParamSpan& p : buf_.params) p.persistent = policy_.parameters && p.count < opts_.param_persistence_threshold;
  // NVMe needs every chunk block-aligned in the swap file: sub-groups padded to 2048
  // elements per rank (8 KiB of f32, 4 KiB of 16-bit) instead of 16.
  layout_ = std::make_unique<PartitionLayout>(buf_.params, world_, opts_.sub_group_size, opts_.nvme ? 2048 : 16);
  const PartitionLayout& lay = *layout_;
  const int units = model.num_units();
  unit_groups_.assign(size_t(units), {});
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) unit_groups_[size_t(lay.sub_groups()[g].unit)].push_back(int(g));
  const size_t n = size_t(lay.model_elements()), shard = size_t(lay.shard_elements());

  std::vector<AdamW::Group> all_groups;
  if (!policy_.optimizer_states) {
    for (size_t i = 0; i < buf_.params.size(); ++i)
      all_groups.push_back({buf_.params[i].offset, buf_.params[i].count, bool(buf_.weight_decay[i])});
  } else {
    for (const OwnedPiece& piece : lay.owned_pieces(rank_))
      all_groups.push_back({piece.shard_offset, piece.count, bool(buf_.weight_decay[size_t(piece.param)])});
  }
  // Offload: the top offload_ratio of the shard is the host's, the rest the device's (the
  // lowest shard offsets are reduced last in backward: updating them on the device right
  // after backward keeps them off the host's critical path).
  host_begin_ = int64_t(shard);
  if (opts_.offload_optimizer) {
    host_begin_ = std::clamp<int64_t>(
        int64_t(std::llround((1.0 - opts_.offload_ratio) * double(shard))) / lay.align() * lay.align(), 0,
        int64_t(shard));
    if (opts_.offload_ratio == 1.0) host_begin_ = 0;
  }
  for (const AdamW::Group& g : all_groups) {  // the device's part of each group
    const int64_t hi = std::min(g.offset + g.count, policy_.optimizer_states ? host_begin_ : g.offset + g.count);
    if (hi > g.offset) groups_.push_back({g.offset, hi - g.offset, g.decay});
  }
  adam_ = std::make_unique<AdamW>(be_, policy_.optimizer_states ? host_begin_ : lay.model_elements(), adam_cfg_);
  if (opts_.offload_optimizer) {
    AdamWConfig host_cfg = adam_cfg_;
    host_cfg.kernel.threads = std::max(1, opts_.host_threads);
    const int64_t chunk =
        std::max<int64_t>(lay.align(), int64_t(tiers_->staging().buffer_bytes() / 4) / lay.align() * lay.align());
    host_ = std::make_unique<HostOptimizer>(*tiers_, host_begin_, int64_t(shard), all_groups, host_cfg,
                                            opts_.speculative_step, buf_.compute_dtype, opts_.offload_param,
                                            opts_.nvme ? &opts_.nvme_options : nullptr, rank_, chunk);
  }

  // Gradients.
  if (!policy_.gradients) {
    grads_full_ = be_.allocate(n * gsz, "grads:full");
    grads_full_.zero();
    direct_grads_ = grad_dtype_ == DType::f32;
  }
  if (policy_.optimizer_states) {
    // On the device: the gradient shard and master of the device's part; in f32 runs the
    // master doubles as the compute shard, so it spans the whole shard unless parameters
    // live on the host; the 16-bit compute shard likewise.
    const size_t dev = size_t(host_begin_);
    const size_t master = low_precision() || opts_.offload_param ? dev : shard;
    shard_grads_ = be_.allocate(dev * gsz, "zero:grad_shard");
    shard_master_ = be_.allocate(master * 4, "zero:master_shard");
    shard_grads_.zero();
    shard_master_.zero();
    if (low_precision() && !opts_.offload_param) shard_compute_ = be_.allocate(shard * esz, "zero:compute_shard");
  }
  // Buckets: the reduce plan (all stages but 0, whose all-reduce is chunked by the same size)
  // and the all-gather plan (stages 1-2). Two slots, so one bucket can be filled while
  // another waits for its last pieces.
  rs_plan_ = BucketPlan(lay, opts_.reduce_bucket_size);
  ag_plan_ = BucketPlan(lay, opts_.allgather_bucket_size);
  const int64_t N = world_;
  int64_t slot = 0;
  if (!policy_.optimizer_states) {
    if (distributed()) slot = std::min<int64_t>(int64_t(n), std::max<int64_t>(opts_.reduce_bucket_size, 1));
    if (!low_precision()) slot = 0;  // f32 all-reduces in place
  } else {
    slot = N * rs_plan_.max_width();
    if (!policy_.parameters) slot = std::max<int64_t>(slot, (N * ag_plan_.max_width() * int64_t(esz) + 3) / 4);
    // Two output slots when offloading, so a bucket's reduction can start while the last
    // one's output is still being copied to the host.
    bucket_out_ = be_.allocate(size_t(rs_plan_.max_width()) * 4 * (host_ ? 2 : 1), "zero:bucket_out");
  }
  slot_elems_ = slot;
  // A second slot only matters when one bucket can be waiting for pieces while another
  // fills: never with a single bucket.
  const int slots = policy_.optimizer_states && rs_plan_.buckets().size() > 1 ? 2 : 1;
  num_slots_ = slots;
  if (slot > 0) bucket_mem_ = be_.allocate(size_t(slots) * size_t(slot) * 4, "zero:buckets");
  remaining_.assign(rs_plan_.buckets().size(), 0);
  rounds_.assign(rs_plan_.buckets().size(), 0);
  for (size_t k = 0; k < remaining_.size(); ++k) remaining_[k] = N * rs_plan_.buckets()[k].width();
  if (host_) {
    // Host chunks: each bucket's host part, cut to fit a staging buffer (f32 gradients), on
    // the layout's alignment (NVMe needs it).
    const int64_t most =
        std::max<int64_t>(lay.align(), int64_t(tiers_->staging().buffer_bytes() / 4) / lay.align() * lay.align());
    bucket_chunks_.assign(rs_plan_.buckets().size(), {});
    for (size_t k = 0; k < rs_plan_.buckets().size(); ++k) {
      const Bucket& b = rs_plan_.buckets()[k];
      for (int64_t a = std::max(b.lo, host_begin_); a < b.hi; a += most) {
        bucket_chunks_[k].push_back(int(chunks_.size()));
        chunks_.push_back({int(k), a, std::min(b.hi, a + most)});
      }
    }
    chunk_sq_.assign(chunks_.size(), 0.0);
    chunk_redo_.assign(chunks_.size(), {});
    for (int i = 0; i < 2; ++i) out_done_.push_back(be_.make_event());
    for (int i = 0; i < tiers_->staging().count(); ++i) stage_ev_.push_back(be_.make_event());
  }

  // Per-unit gradient scratch (f32) for whatever the model cannot write in place: the
  // embeddings (open through the whole backward) plus two more units in flight.
  std::vector<int64_t> sizes;
  int64_t max_unit = 0;
  for (int u = 0; u < units; ++u)
    sizes.push_back(model.unit_count(u)), max_unit = std::max(max_unit, model.unit_count(u));
  std::sort(sizes.rbegin(), sizes.rend());
  opens_.assign(size_t(units), 0);
  grad_block_.assign(size_t(units), -1);
  for (int u = 0; u < units; ++u) grad_done_.push_back(be_.make_event());
  if (!direct_grads_) {
    size_t cap = 0;
    for (size_t i = 0; i < std::min<size_t>(3, sizes.size()); ++i) cap += (size_t(sizes[i]) * 4 + 63) / 64 * 64;
    grad_scratch_mem_ = be_.allocate(cap, "zero:grad_scratch");
    grad_arena_.reset(cap, size_t(units) + 1);
  }

  // Stage 3: persistent parameters and the gather arena.
  resident_.assign(size_t(units), {});
  access_.reset(units);
  if (policy_.parameters) {
    persistent_offset_.assign(lay.sub_groups().size(), -1);
    int64_t persist = 0;
    for (size_t g = 0; g < lay.sub_groups().size(); ++g)
      if (lay.sub_groups()[g].persistent) persistent_offset_[g] = persist, persist += lay.sub_groups()[g].padded;
    if (persist > 0) persistent_ = be_.allocate(size_t(persist) * esz, "zero:persistent_params");
    slack_elems_ = size_t(N * lay.align());
    size_t cap = 0;
    if (opts_.max_live_params > 0) {
      cap = size_t(opts_.max_live_params) * esz;
    } else {
      for (size_t i = 0; i < std::min<size_t>(size_t(opts_.prefetch_depth) + 2, sizes.size()); ++i)
        cap += ((size_t(sizes[i]) + slack_elems_) * esz + 63) / 64 * 64;
    }
    const size_t need = ((size_t(max_unit) + slack_elems_) * esz + 63) / 64 * 64;
    STRATA_CHECK(cap >= need,
                 "--max-live-params " + std::to_string(opts_.max_live_params) + " cannot hold the largest unit (" +
                     std::to_string(max_unit) + " parameters plus " + std::to_string(slack_elems_) + " of padding)",
                 "raise --max-live-params to at least " + std::to_string(max_unit + int64_t(slack_elems_)) +
                     ", or 0 to size it from --prefetch-depth");
    gathered_mem_ = be_.allocate(cap, "zero:gathered_params");
    if (hpz()) {
      const int64_t K = hpz_comm_->size();
      secondary_offset_.assign(lay.sub_groups().size(), -1);
      int64_t secondary = 0;
      for (size_t g = 0; g < lay.sub_groups().size(); ++g)
        if (!lay.sub_groups()[g].persistent)
          secondary_offset_[g] = secondary, secondary += lay.sub_groups()[g].padded / K;
      secondary_ = be_.allocate(size_t(secondary) * esz, "zero:hpz_secondary_params");
      secondary_valid_.assign(size_t(units), 0);
    }
    gather_arena_.reset(cap, size_t(units) + 1);
    for (int u = 0; u < units; ++u) gathered_.push_back(be_.make_event());
    if (opts_.offload_param) {
      // Each gathered unit's shard pieces come host→device into this arena first.
      int64_t max_shard = 0;
      for (int u = 0; u < units; ++u) {
        const auto& gs = unit_groups_[size_t(u)];
        if (gs.empty()) continue;
        const SubGroup& last = lay.sub_groups()[size_t(gs.back())];
        max_shard = std::max(max_shard, lay.shard_offset(gs.back()) + last.shard - lay.shard_offset(gs.front()));
      }
      const size_t fcap = (size_t(opts_.prefetch_depth) + 2) * ((size_t(max_shard) * esz + 63) / 64 * 64);
      fetch_mem_ = be_.allocate(fcap, "zero:fetched_shards");
      fetch_arena_.reset(fcap, size_t(units) + 1);
      fetch_off_.assign(size_t(units), -1);
      for (int u = 0; u < units; ++u) fetched_.push_back(be_.make_event());
      int64_t persist_shard = 0;
      for (const SubGroup& g : lay.sub_groups())
        if (g.persistent) persist_shard += g.shard;
      if (persist_shard > 0) persist_stage_ = be_.allocate(size_t(persist_shard) * esz, "zero:persistent_staging");
    }
  }

  // strata plan sizes runs with engine_footprint: what was allocated here must be exactly that.
  {
    std::vector<int64_t> unit_sizes;
    for (int u = 0; u < units; ++u) unit_sizes.push_back(model.unit_count(u));
    const uint64_t block = host_ && host_->nvme_file() ? host_->nvme_file()->block_size() : 4096;
    const EngineFootprint f = engine_footprint(buf_.params, unit_sizes, world_, buf_.compute_dtype, opts_,
                                               tiers_ ? tiers_->staging().buffer_bytes() : 0, block);
    const uint64_t dev = be_.budget().used() - device_before;
    const uint64_t host = tiers_ ? tiers_->budget(Tier::host).used() - host_before : 0;
    const uint64_t nvme = host_ && host_->nvme_file() ? host_->nvme_file()->capacity() : 0;
    STRATA_CHECK(dev == f.device && host == f.host && nvme == f.nvme,
                 "ZeroEngine allocated device/host/NVMe " + std::to_string(dev) + "/" + std::to_string(host) + "/" +
                     std::to_string(nvme) + " bytes but engine_footprint says " + std::to_string(f.device) + "/" +
                     std::to_string(f.host) + "/" + std::to_string(f.nvme),
                 "this is a bug: zero/footprint.cpp must mirror ZeroEngine::attach (strata plan relies on it)");
  }

  // Initial master shard: from the model's full parameters, or unit by unit.
  if (policy_.optimizer_states) {
    std::vector<float> unit(static_cast<size_t>(max_unit));  // one unit at a time, never the whole model
    std::vector<float> mine;                                 // this rank's slice of the unit
    for (int u = 0; u < units; ++u) {
      const float* src = buf_.master ? buf_.master + model.unit_begin(u) : unit.data();
      if (!buf_.master) {
        if (init)
          init->read(model.unit_begin(u), model.unit_count(u), unit.data());
        else
          model.init_unit(u, seed, unit.data());
      }
      // The unit's shard range is contiguous (and aligned): assemble it, then store it where
      // it lives — the device's part and the host's (RAM or NVMe).
      const int64_t A = unit_shard_begin(u), B = unit_shard_end(u);
      mine.assign(size_t(B - A), 0.0f);
      for (int gi : unit_groups_[size_t(u)]) {
        const SubGroup& g = lay.sub_groups()[size_t(gi)];
        const int64_t lo = std::min(g.count, int64_t(rank_) * g.shard),
                      hi = std::min(g.count, int64_t(rank_ + 1) * g.shard);
        if (hi > lo)
          std::memcpy(mine.data() + (lay.shard_offset(gi) - A), src + (g.flat_begin - model.unit_begin(u)) + lo,
                      size_t(hi - lo) * 4);
      }
      const int64_t split = std::clamp(host_begin_, A, B);
      if (split > A) std::memcpy(shard_master_.as<float>() + A, mine.data(), size_t(split - A) * 4);
      if (B > split) host_->write_master(split, B, mine.data() + (split - A));
    }
    if (host_) {
      host_->finish_init();
      // The device's copy of the host part: the f32 mirror, or the 16-bit compute shard.
      const int64_t most = int64_t(1) << 20;
      std::vector<float> part;
      for (int64_t a = host_begin_; !opts_.offload_param && a < int64_t(shard); a += most) {
        const int64_t b = std::min<int64_t>(int64_t(shard), a + most);
        if (!low_precision()) {
          host_->read_master(a, b, shard_master_.as<float>() + a);
        } else {
          part.resize(size_t(b - a));
          host_->read_master(a, b, part.data());
          cpu::convert_from_f32(static_cast<char*>(shard_compute_.data()) + size_t(a) * esz, buf_.compute_dtype,
                                part.data(), size_t(b - a));
        }
      }
    }
    if (low_precision() && shard_compute_.data())
      be_.cast({shard_compute_.data(), buf_.compute_dtype, {host_begin_}, Tier::device},
               {shard_master_.data(), DType::f32, {host_begin_}, Tier::device});
    if (!policy_.parameters && !buf_.master) publish_params();  // fill the model's 16-bit copy
    if (policy_.parameters) {
      publish_persistent();
      drain();
    }
  }
}

// ---------------------------------------------------------------- gradients

float* ZeroEngine::bucket_slot(int bucket) {
  for (int s = 0; s < num_slots_; ++s)
    if (slot_bucket_[s] == bucket) return bucket_mem_.as<float>() + s * slot_elems_;
  for (int s = 0; s < num_slots_; ++s)
    if (slot_bucket_[s] < 0) {
      slot_bucket_[s] = bucket;
      return bucket_mem_.as<float>() + s * slot_elems_;
    }
  throw_error("gradient buckets completed out of order: a bucket was started while every slot held an incomplete one",
              "raise --reduce-bucket-size (the model's backward does not produce units in layout order)");
}

void ZeroEngine::begin_step(const StepPlan& plan) {
  plan_ = plan;
  speculated_ = false;
  last_micro_ = true;
  if (direct_grads_) grads_full_.zero();
  std::fill(opens_.begin(), opens_.end(), 0);
  std::fill(rounds_.begin(), rounds_.end(), 0);
  access_.begin_step();
  current_unit_ = pending_release_ = -1;
}

void ZeroEngine::open_grads(int unit) {
  ++opens_[size_t(unit)];
  if (direct_grads_) {  // f32, stages 0-1: accumulate straight into the full gradients
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
  std::memset(scratch, 0, bytes);
  model_->set_unit_grads(unit, scratch);
}

void ZeroEngine::close_grads(int unit) {
  if (direct_grads_) return;
  const int64_t off = grad_block_[size_t(unit)];
  const bool first = opens_[size_t(unit)] == 1;
  if (policy_.gradients)
    submit([this, key = (uint64_t(off) << 17) | (uint64_t(last_micro_) << 16) | uint64_t(unit)] {
      reduce_unit_work(int(key & 0xffff), int64_t(key >> 17), (key >> 16) & 1);
    });
  else
    submit([this, key = (uint64_t(off) << 17) | (uint64_t(first) << 16) | uint64_t(unit)] {
      close_unit_work(int(key & 0xffff), int64_t(key >> 17), (key >> 16) & 1);
    });
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
  accumulate_into(dst, grad_dtype_, scratch, model_->unit_count(unit), !first);
}

void ZeroEngine::reduce_unit_work(int unit, int64_t scratch_offset, bool last) {
  const PartitionLayout& lay = *layout_;
  const float* scratch =
      reinterpret_cast<const float*>(static_cast<const char*>(grad_scratch_mem_.data()) + scratch_offset);
  const auto& groups = unit_groups_[size_t(unit)];
  for (auto it = groups.rbegin(); it != groups.rend(); ++it) {  // descending shard offsets, like the buckets
    const SubGroup& g = lay.sub_groups()[size_t(*it)];
    for (const BucketPlan::Ref& ref : rs_plan_.refs_of_group(*it)) {
      const Bucket& b = rs_plan_.buckets()[size_t(ref.bucket)];
      const BucketPiece& piece = b.pieces[size_t(ref.piece)];
      pack_piece(lay, b, piece, scratch + (g.flat_begin - model_->unit_begin(unit)), DType::f32,
                 bucket_slot(ref.bucket));
      remaining_[size_t(ref.bucket)] -= int64_t(world_) * (piece.hi - piece.lo);
      if (remaining_[size_t(ref.bucket)] == 0) reduce_bucket(ref.bucket, last);
    }
  }
}

void ZeroEngine::reduce_bucket(int k, bool last) {
  const Bucket& b = rs_plan_.buckets()[size_t(k)];
  float* in = bucket_slot(k);
  const float* out = in;
  const int o = out_slot_;
  if (distributed()) {
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(rs_plan_.max_width());
    if (host_) out_done_[size_t(o)]->synchronize();  // its last host copy has left
    comm_->reduce_scatter(std::span<const float>(in, size_t(world_ * b.width())),
                          std::span<float>(dst, size_t(b.width())));
    out = dst;
  } else if (host_) {  // one rank: the "reduction" is the bucket itself; copy it out of the slot
    float* dst = bucket_out_.as<float>() + size_t(o) * size_t(rs_plan_.max_width());
    out_done_[size_t(o)]->synchronize();
    std::memcpy(dst, in, size_t(b.width()) * 4);
    out = dst;
  }
  const bool first = rounds_[size_t(k)] == 0;
  const int64_t dev_hi = std::min(b.hi, host_begin_);  // the device's part of the bucket
  if (dev_hi > b.lo) {
    char* shard = static_cast<char*>(shard_grads_.data()) + size_t(b.lo) * dtype_size(grad_dtype_);
    accumulate_into(shard, grad_dtype_, out, dev_hi - b.lo, !first);
  }
  if (host_ && !bucket_chunks_[size_t(k)].empty()) {
    for (int c : bucket_chunks_[size_t(k)]) offload_chunk(c, o, first, last);
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
  const int s = tm.staging().acquire();
  Event& ev = *stage_ev_[size_t(s)];
  const HostChunk& ch = chunks_[size_t(c)];
  // The reduced gradients to the staging buffer: a copy the backend orders on the d2h stream.
  const float* src = bucket_out_.as<float>() + size_t(o) * size_t(rs_plan_.max_width()) +
                     (ch.lo - rs_plan_.buckets()[size_t(ch.bucket)].lo);
  be_.copy_async(tm.staging().data(s), src, size_t(ch.hi - ch.lo) * 4, tm.d2h());
  tm.count(tier::Edge::d2h, size_t(ch.hi - ch.lo) * 4);
  tm.d2h().record(ev);
  // Chunk, staging buffer and first-micro-batch flag in one word: captures of at most two
  // words stay inside std::function (no allocation in the step).
  const uint64_t key = (uint64_t(uint32_t(c)) << 32) | (uint64_t(s & 0x7fff) << 1) | uint64_t(first);
  tm.host_sum().wait(ev);
  tm.host_sum().launch_host([this, key] {
    const int chunk = int(key >> 32);
    const void* staging = tiers_->staging().data(int((key >> 1) & 0x7fff));
    chunk_sq_[size_t(chunk)] = host_->accumulate(chunks_[size_t(chunk)], static_cast<const float*>(staging), key & 1);
  });
  tm.host_sum().record(ev);
  const bool update = last && host_->speculative();
  if (update) {
    tm.host().wait(ev);
    tm.host().launch_host([this, key] {
      void* staging = tiers_->staging().data(int((key >> 1) & 0x7fff));
      const size_t c = size_t(key >> 32);
      host_->update(chunks_[c], c + 1 < chunks_.size() ? &chunks_[c + 1] : nullptr, plan_.lr, plan_.grad_scale, plan_.t,
                    device_compute_at(0) ? staging : nullptr);
    });
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
  const HostChunk& h = chunks_[size_t(c)];
  const size_t bytes = size_t(h.hi - h.lo) * (low_precision() ? dtype_size(buf_.compute_dtype) : 4);
  tm.h2d().wait(ev);
  be_.copy_async(device_compute_at(h.lo), tm.staging().data(s), bytes, tm.h2d());
  tm.count(tier::Edge::h2d, bytes);
  tm.h2d().record(ev);
}

// The host part of the step once the norm is known: an update (not speculated, or redone
// with the real clip scale) or, after an overflow, a restore of the speculative copy-out.
void ZeroEngine::host_update_chunk(int c, float lr, float grad_scale, int64_t t, bool restore) {
  tier::TierManager& tm = *tiers_;
  const int s = tm.staging().acquire();
  Event& ev = *stage_ev_[size_t(s)];
  const uint64_t key = (uint64_t(uint32_t(c)) << 32) | (uint64_t(s) << 1) | uint64_t(restore);
  // The chunk's own copy of the step's values: the host thread reads it while later chunks
  // (and, after a skipped step, the next step) are queued with other values. Written here
  // only after the chunk's previous host work is done (each step flushes the host stream).
  chunk_redo_[size_t(c)] = {lr, grad_scale, t};
  tm.host().launch_host([this, key] {
    const size_t c = size_t(key >> 32);
    const HostChunk& h = chunks_[c];
    void* staging = device_compute_at(0) ? tiers_->staging().data(int((key >> 1) & 0x7fff)) : nullptr;
    if (key & 1)
      host_->restore(h, staging);
    else
      host_->update(h, c + 1 < chunks_.size() ? &chunks_[c + 1] : nullptr, chunk_redo_[c].lr, chunk_redo_[c].grad_scale,
                    chunk_redo_[c].t, staging);
  });
  tm.host().record(ev);
  if (device_compute_at(0)) copy_update_to_device(c, s, ev);
  tm.staging().release_after(s, ev);
}

void ZeroEngine::reduce_stage0() {
  if (!distributed()) return;
  const int64_t n = layout_->model_elements();
  if (!low_precision()) {
    const int64_t chunk = std::max<int64_t>(1, opts_.reduce_bucket_size);
    for (int64_t i = 0; i < n; i += chunk)
      comm_->all_reduce(std::span<float>(grads_full_.as<float>() + i, size_t(std::min(chunk, n - i))));
    return;
  }
  float* staging = bucket_mem_.as<float>();
  char* g = static_cast<char*>(grads_full_.data());
  const size_t gsz = dtype_size(grad_dtype_);
  for (int64_t i = 0; i < n; i += slot_elems_) {
    const int64_t len = std::min(slot_elems_, n - i);
    cpu::convert_to_f32(staging, g + size_t(i) * gsz, grad_dtype_, size_t(len));
    comm_->all_reduce(std::span<float>(staging, size_t(len)));
    cpu::convert_from_f32(g + size_t(i) * gsz, grad_dtype_, staging, size_t(len));
  }
}

void ZeroEngine::reduce_stage1() {
  // The full gradients are complete: pack each bucket from them and reduce-scatter it.
  const PartitionLayout& lay = *layout_;
  const size_t gsz = dtype_size(grad_dtype_);
  for (size_t k = 0; k < rs_plan_.buckets().size(); ++k) {
    const Bucket& b = rs_plan_.buckets()[k];
    float* slot = bucket_slot(int(k));
    for (const BucketPiece& piece : b.pieces)
      pack_piece(
          lay, b, piece,
          static_cast<const char*>(grads_full_.data()) + size_t(lay.sub_groups()[size_t(piece.group)].flat_begin) * gsz,
          grad_dtype_, slot);
    reduce_bucket(int(k), true);
  }
}

ReducedStep ZeroEngine::reduce_gradients(double loss_part, bool stop) {
  drain();  // every bucket reduced, every 16-bit close accumulated
  for (size_t k = 0; k < remaining_.size(); ++k)
    STRATA_CHECK(!policy_.gradients || rounds_[k] > 0 || rs_plan_.buckets()[k].width() == 0,
                 "gradient bucket " + std::to_string(k) + " was never reduced this step",
                 "the model did not close every unit's gradients; this is a bug in the model's hooks");
  double sq = 0;
  if (!policy_.optimizer_states) {
    reduce_stage0();
    // Every rank holds the same reduced gradients: each sums the squares of its 1/N.
    const int64_t n = layout_->model_elements(), lo = n * rank_ / world_, hi = n * (rank_ + 1) / world_;
    sq = be_.sum_squares({static_cast<char*>(grads_full_.data()) + size_t(lo) * dtype_size(grad_dtype_),
                          grad_dtype_,
                          {hi - lo},
                          Tier::device});
  } else {
    if (!policy_.gradients) reduce_stage1();
    sq = be_.sum_squares({shard_grads_.data(), grad_dtype_, {host_begin_}, Tier::device});
    if (host_) {  // the host's part: its chunks' square sums, in chunk order
      const auto t0 = std::chrono::steady_clock::now();
      tiers_->d2h().synchronize();
      tiers_->host_sum().synchronize();
      stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (double c : chunk_sq_) sq += c;
    }
  }
  // One all-reduce agrees on the loss, the norm, overflow (a non-finite square sum) and stop.
  double v[4] = {loss_part, sq, std::isfinite(sq) ? 0.0 : 1.0, stop ? 1.0 : 0.0};
  if (distributed()) comm_->all_reduce(std::span<double>(v, 4));
  return {v[0], std::sqrt(v[1]), v[2] > 0 || !std::isfinite(v[1]), v[3] > 0};
}

// ---------------------------------------------------------------- optimizer and parameters

bool ZeroEngine::step(float lr, float grad_scale, int64_t t) {
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
  bool nonfinite;
  if (!policy_.optimizer_states) {
    nonfinite = adam_->step(buf_.master, grads_full_.data(), grad_dtype_, low_precision() ? buf_.compute : nullptr,
                            buf_.compute_dtype, groups_, lr, grad_scale, t);
  } else {
    nonfinite =
        adam_->step(shard_master_.as<float>(), shard_grads_.data(), grad_dtype_,
                    low_precision() ? shard_compute_.data() : nullptr, buf_.compute_dtype, groups_, lr, grad_scale, t);
  }
  if (host_) {
    flush_host();
    host_->commit();
  }
  finish_step();
  if (policy_.optimizer_states && !policy_.parameters) publish_params();
  if (policy_.parameters) publish_persistent();
  drain();
  return nonfinite;
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
                      std::span<T>(padded_out, size_t(g.padded)));
  else
    std::memcpy(padded_out, shard + shard_off, size_t(g.shard) * sizeof(T));
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
                          std::span<uint16_t>(reinterpret_cast<uint16_t*>(slot), w * size_t(world_)));
      else
        comm_->all_gather(std::span<const float>(reinterpret_cast<const float*>(shard) + b.lo, w),
                          std::span<float>(reinterpret_cast<float*>(slot), w * size_t(world_)));
    } else {
      std::memcpy(slot, shard + size_t(b.lo) * esz, w * esz);
    }
    for (const BucketPiece& piece : b.pieces)
      unpack_piece(lay, b, piece, slot, esz, full + size_t(lay.sub_groups()[size_t(piece.group)].flat_begin) * esz);
  }
}

void ZeroEngine::publish_persistent() {
  if (persistent_.bytes() == 0) return;
  submit([this] {
    const PartitionLayout& lay = *layout_;
    const size_t esz = dtype_size(buf_.compute_dtype);
    int64_t staged = 0;  // --offload-param: the slices come host→device first
    for (size_t g = 0; g < lay.sub_groups().size(); ++g) {
      if (persistent_offset_[g] < 0) continue;
      const SubGroup& s = lay.sub_groups()[g];
      const char* shard = static_cast<const char*>(shard_source());
      int64_t off = lay.shard_offset(int(g));
      if (opts_.offload_param) {  // this rank's slice comes from its home in host RAM or on NVMe
        char* dst = static_cast<char*>(persist_stage_.data()) + size_t(staged) * esz;
        host_->read_compute(off, off + s.shard, dst);
        tiers_->count(tier::Edge::h2d, size_t(s.shard) * esz);
        shard = dst, off = 0, staged += s.shard;
      }
      if (low_precision())
        gather_group(s, off, reinterpret_cast<const uint16_t*>(shard),
                     persistent_.as<uint16_t>() + persistent_offset_[g]);
      else
        gather_group(s, off, reinterpret_cast<const float*>(shard), persistent_.as<float>() + persistent_offset_[g]);
    }
  });
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
      std::memcpy(at, static_cast<const char*>(persistent_.data()) + size_t(persistent_offset_[size_t(gi)]) * esz,
                  size_t(g.count) * esz);
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
    hpz_comm_->all_gather(std::span<const T>(mine, slice), std::span<T>(padded_out, size_t(s.padded)));
  } else {
    gather_group(s, shard_off, shard, padded_out);
    // Kept before the next sub-group's gather overwrites this one's padding.
    std::memcpy(mine, padded_out + size_t(hpz_comm_->rank()) * slice, slice * sizeof(T));
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
  tiers_->h2d().launch_host([this, key = (uint64_t(off) << 16) | uint64_t(unit)] {
    const int u = int(key & 0xffff);
    const size_t esz = dtype_size(buf_.compute_dtype);
    const size_t n = size_t(unit_shard_end(u) - unit_shard_begin(u)) * esz;
    host_->read_compute(unit_shard_begin(u), unit_shard_end(u), static_cast<char*>(fetch_mem_.data()) + (key >> 16));
    tiers_->count(tier::Edge::h2d, n);
  });
  tiers_->h2d().record(*fetched_[size_t(unit)]);
  if (stream_)
    stream_->wait(*fetched_[size_t(unit)]);
  else
    fetched_[size_t(unit)]->synchronize();
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
  submit([this, key = (uint64_t(off) << 16) | uint64_t(unit)] {
    gather_unit_work(int(key & 0xffff), int64_t(key >> 16));
  });
  if (stream_) stream_->record(*gathered_[size_t(unit)]);
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
    gathered_[size_t(unit)]->synchronize();
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
    std::memcpy(out.data(), buf_.master, out.size() * 4);
    return;
  }
  wait_host();
  // This rank's master shard, from the device and (offloaded part) the host.
  std::vector<float> mine(static_cast<size_t>(lay.shard_elements()));
  if (host_begin_ > 0) std::memcpy(mine.data(), shard_master_.data(), size_t(host_begin_) * 4);
  if (host_ && mine.size() > size_t(host_begin_))
    host_->read_master(host_begin_, int64_t(mine.size()), mine.data() + host_begin_);
  std::vector<float> padded(static_cast<size_t>(lay.padded_elements()));
  for (size_t g = 0; g < lay.sub_groups().size(); ++g)
    gather_group(lay.sub_groups()[g], lay.shard_offset(int(g)), mine.data(),
                 padded.data() + lay.sub_groups()[g].storage_offset);
  for (const SubGroup& g : lay.sub_groups())
    std::memcpy(out.data() + g.flat_begin, padded.data() + g.storage_offset, size_t(g.count) * 4);
}

size_t ZeroEngine::param_bytes() const { return policy_.parameters ? shard_compute_.bytes() + persistent_.bytes() : 0; }

size_t ZeroEngine::grad_bytes() const { return policy_.gradients ? shard_grads_.bytes() : grads_full_.bytes(); }

size_t ZeroEngine::optimizer_state_bytes() const { return adam_->state_bytes() + shard_master_.bytes(); }

size_t ZeroEngine::host_bytes() const { return host_ ? host_->bytes() : 0; }

size_t ZeroEngine::comm_buffer_bytes() const {
  return bucket_mem_.bytes() + bucket_out_.bytes() + grad_scratch_mem_.bytes() + gathered_mem_.bytes() +
         fetch_mem_.bytes() + persist_stage_.bytes() + (policy_.gradients ? 0 : shard_grads_.bytes()) +
         (policy_.parameters ? 0 : shard_compute_.bytes());
}

std::vector<ZeroEngine::StatePiece> ZeroEngine::state_pieces(int64_t max_count) const {
  std::vector<StatePiece> out;
  std::vector<OwnedPiece> owned;
  if (policy_.optimizer_states) {
    owned = layout_->owned_pieces(rank_);
  } else if (rank_ == 0) {  // every rank holds everything: one copy is enough
    for (size_t i = 0; i < buf_.params.size(); ++i)
      owned.push_back({int(i), buf_.params[i].offset, buf_.params[i].count, buf_.params[i].offset});
  }
  for (int kind = 0; kind < 3; ++kind)
    for (const OwnedPiece& p : owned)
      for (int64_t a = 0; a < p.count; a += max_count)
        out.push_back({kind, p.flat_begin + a, std::min(max_count, p.count - a), p.shard_offset + a});
  return out;
}

void ZeroEngine::shard_state_io(int kind, int64_t lo, int64_t hi, float* buf, bool write) {
  // Stage 0 keeps the master in the model and m, v in AdamW, both by flat offset.
  const int64_t split = policy_.optimizer_states ? std::clamp(host_begin_, lo, hi) : hi;
  if (split > lo) {
    float* dev = kind == 0   ? (policy_.optimizer_states ? shard_master_.as<float>() : buf_.master)
                 : kind == 1 ? adam_->m()
                             : adam_->v();
    // The CPU backend's device memory is host-addressable (S8 replaces this with copies).
    if (write)
      std::memcpy(dev + lo, buf, size_t(split - lo) * 4);
    else
      std::memcpy(buf, dev + lo, size_t(split - lo) * 4);
  }
  if (hi > split) {
    // The host part: NVMe reads and writes whole aligned blocks, so widen to them.
    const int64_t al = host_->alignment(), base = host_->begin();
    const int64_t A = base + (split - base) / al * al,
                  B = std::min(host_->end(), base + (hi - base + al - 1) / al * al);
    std::vector<float> tmp(size_t(B - A));
    host_->read_committed(kind, A, B, tmp.data());
    float* part = buf + (split - lo);
    if (!write) {
      std::memcpy(part, tmp.data() + (split - A), size_t(hi - split) * 4);
    } else {
      std::memcpy(tmp.data() + (split - A), part, size_t(hi - split) * 4);
      host_->write_state(kind, A, B, tmp.data());
    }
  }
}

void ZeroEngine::read_state(const StatePiece& p, float* out) {
  drain();
  wait_host();
  shard_state_io(p.kind, p.shard_offset, p.shard_offset + p.count, out, false);
}

void ZeroEngine::load_moments(const FlatSource& m, const FlatSource& v) {
  drain();
  wait_host();
  std::vector<float> buf;
  for (const StatePiece& p : state_pieces(int64_t(1) << 22)) {
    if (p.kind == 0) continue;
    buf.resize(size_t(p.count));
    (p.kind == 1 ? m : v).read(p.flat_begin, p.count, buf.data());
    shard_state_io(p.kind, p.shard_offset, p.shard_offset + p.count, buf.data(), true);
  }
  if (!policy_.optimizer_states && rank_ != 0) {  // stage 0: the other ranks' full copies
    for (size_t i = 0; i < buf_.params.size(); ++i) {
      const ParamSpan& ps = buf_.params[i];
      for (int kind = 1; kind < 3; ++kind)
        (kind == 1 ? m : v).read(ps.offset, ps.count, (kind == 1 ? adam_->m() : adam_->v()) + ps.offset);
    }
  }
}

}  // namespace strata::zero
