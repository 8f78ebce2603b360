// ZeroEngine, part 1 of 4: options, construction and attach (sizing and allocation), and the
// stream helpers the other parts share (zero_engine_grads/params/state.cpp).
#include "zero/zero_engine.h"

#include <algorithm>
#include <array>
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
  compute_done_ = be_.make_event();
  reduced_ = be_.make_event();
  staged_ = be_.make_event();
  published_ = be_.make_event();
  if (comm_) comm_->bind(be_);  // the engine's collectives run on its buffers, on streams
  // Groups of K consecutive ranks: with ranks placed node by node, a group is (part of) a node.
  if (K > 1 && distributed()) {
    hpz_comm_ = comm_->split(rank_ / K);
    hpz_comm_->bind(be_);
  }
}

ZeroEngine::~ZeroEngine() {
  // Queued work on every stream the engine used refers to it: let it finish before the
  // engine goes (on the error path too; the errors were reported already).
  std::array<Stream*, 5> all{stream_.get()};
  if (tiers_) std::ranges::copy(tiers_->streams(), all.begin() + 1);
  for (Stream* st : all)
    if (st) try {
        st->synchronize();  // each one, even after another failed
      } catch (...) {
      }
}

double* ZeroEngine::loss_sum() const { return scalars_.as<double>(); }

void ZeroEngine::after_compute() {
  if (!stream_) return;  // cs() is the compute stream itself
  be_.compute_stream().record(*compute_done_);
  stream_->wait(*compute_done_);
}

// The engine's host thread takes a staging buffer for a chunk or a fetch; the wait (every
// buffer still in the pipeline) counts as blocked time.
int ZeroEngine::acquire_staging() {
  const auto t0 = std::chrono::steady_clock::now();
  const int s = tiers_->staging().acquire();
  stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
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
  for (Stream* st : tiers_->streams()) st->synchronize();
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
  Stream& compute = be_.compute_stream();
  scalars_ = be_.allocate(kStepScalarBytes, "zero:step_scalars");
  be_.fill_zero(scalars_.data(), scalars_.bytes(), compute);
  if (!policy_.gradients) {
    grads_full_ = be_.allocate(n * gsz, "grads:full");
    be_.fill_zero(grads_full_.data(), grads_full_.bytes(), compute);
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
    be_.fill_zero(shard_grads_.data(), shard_grads_.bytes(), compute);
    be_.fill_zero(shard_master_.data(), shard_master_.bytes(), compute);
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
    for (int i = 0; i < 2; ++i) out_done_.push_back(be_.make_event());
    for (int i = 0; i < tiers_->staging().count(); ++i) stage_ev_.push_back(be_.make_event());
    stage_task_.assign(size_t(tiers_->staging().count()), {});
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
      const float* src = unit.data();
      if (buf_.master) {  // the model's full master is device memory: this unit comes to the host
        be_.download(unit.data(), buf_.master + model.unit_begin(u), size_t(model.unit_count(u)) * 4);
      } else {
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
      if (split > A) be_.upload(shard_master_.as<float>() + A, mine.data(), size_t(split - A) * 4);
      if (B > split) host_->write_master(split, B, mine.data() + (split - A));
    }
    if (host_) {
      host_->finish_init();
      // The device's copy of the host part: the f32 mirror, or the 16-bit compute shard.
      const int64_t most = int64_t(1) << 20;
      std::vector<float> part;
      std::vector<uint16_t> half;
      for (int64_t a = host_begin_; !opts_.offload_param && a < int64_t(shard); a += most) {
        const int64_t b = std::min<int64_t>(int64_t(shard), a + most);
        part.resize(size_t(b - a));
        host_->read_master(a, b, part.data());
        if (!low_precision()) {
          be_.upload(shard_master_.as<float>() + a, part.data(), size_t(b - a) * 4);
        } else {
          half.resize(size_t(b - a));
          cpu::convert_from_f32(half.data(), buf_.compute_dtype, part.data(), size_t(b - a));
          be_.upload(static_cast<char*>(shard_compute_.data()) + size_t(a) * esz, half.data(), size_t(b - a) * esz);
        }
      }
    }
    if (low_precision() && shard_compute_.data())
      be_.cast({shard_compute_.data(), buf_.compute_dtype, {host_begin_}, Tier::device},
               {shard_master_.data(), DType::f32, {host_begin_}, Tier::device});
    if (!policy_.parameters && !buf_.master) publish_params();  // fill the model's 16-bit copy
    if (policy_.parameters) publish_persistent();
    drain();  // the host's collectives may follow: none of the engine's may still be queued
  }
}

}  // namespace strata::zero
