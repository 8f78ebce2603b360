// ZeroEngine, part 1 of 4: options, construction and attach (sizing and allocation), and the
// stream helpers the other parts share (zero_engine_grads/params/state.cpp).
#include "zero/zero_engine.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "host/convert.h"

namespace strata::zero {

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
  check_zero_options(opts_, world_);
  STRATA_CHECK(!(opts_.offload_optimizer || opts_.offload_param) || tiers_,
               "ZeroEngine: offload without a tier manager", "this is a bug in the caller");
  const int K = opts_.hpz_partition_size;
  if (opts_.overlap_comm) stream_ = be_.make_stream("zero:comm");
  compute_done_ = be_.make_event();
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

void ZeroEngine::drain() {
  if (!stream_) return;
  const auto t0 = std::chrono::steady_clock::now();
  stream_->synchronize();
  stats_.blocked_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Waits, on the compute thread, for the host side's queued work (copies, CPU Adam).
void ZeroEngine::wait_host() {
  if (offload_) offload_->wait();
}

void ZeroEngine::attach(UnitModel& model, ModelBuffers buffers, uint64_t seed, const FlatSource* init) {
  model_ = &model;
  buf_ = std::move(buffers);
  STRATA_CHECK(policy_.parameters || buf_.master || buf_.compute,
               "ZeroEngine: stage " + std::to_string(opts_.stage) + " needs the model's parameters",
               "this is a bug in the caller");
  STRATA_CHECK(policy_.optimizer_states || buf_.master, "ZeroEngine: stage 0 needs the model's f32 master parameters",
               "this is a bug in the caller");
  grad_dtype_ = buf_.compute_dtype;
  const size_t device_before = be_.budget().used(), host_before = tiers_ ? tiers_->budget(Tier::host).used() : 0;
  const int units = model.num_units();
  {
    EnginePlanInput in{buf_.params, {}, world_, buf_.compute_dtype, opts_, 0, 4096};
    for (int u = 0; u < units; ++u) in.unit_sizes.push_back(model.unit_count(u));
    if (tiers_) {
      in.staging_buffer_bytes = tiers_->staging().buffer_bytes();
      const MemoryBudget& host = tiers_->budget(Tier::host);
      in.host_free = host.capacity() - std::min(host.used(), host.capacity());
    }
    if (opts_.nvme)  // the swap file's regions are aligned to its file system's direct-I/O block
      in.nvme_block = io::NvmeFile(opts_.nvme_options, "strata-rank" + std::to_string(rank_) + ".swap", 1).block_size();
    plan_ = plan_engine(in);
  }
  const PartitionLayout& lay = plan_.layout;
  const EngineDeviceBuffers& d = plan_.device;
  buf_.params = lay.params();  // with the persistence the plan decided

  // The optimizer: AdamW over the device's part, the CPU Adam over the host's.
  const std::vector<AdamW::Group> all_groups = optimizer_groups(lay, policy_, rank_);
  groups_ = device_groups(all_groups, policy_, plan_.host_begin);
  AdamW::place_f32_masters(groups_, opts_.states);  // beside a bf16 master (sized by the plan)
  adam_ = std::make_unique<AdamW>(be_, plan_.device_adam_elements(), adam_cfg_, opts_.states);
  if (opts_.offload_optimizer) {
    AdamWConfig host_cfg = adam_cfg_;
    host_cfg.kernel.threads = std::max(1, opts_.host_threads);
    HostOptimizerPlan hp;
    hp.begin = plan_.host_begin, hp.end = lay.shard_elements(), hp.groups = all_groups, hp.config = host_cfg;
    hp.speculative = opts_.speculative_step, hp.compute_dtype = buf_.compute_dtype;
    hp.keep_compute = opts_.offload_param, hp.nvme = opts_.nvme ? &opts_.nvme_options : nullptr, hp.rank = rank_;
    hp.chunk_elements = plan_.chunk_elements, hp.format = opts_.states;
    hp.f32_master_room = plan_.host.f32_master_elements;
    host_ = std::make_unique<HostOptimizer>(*tiers_, hp);
  }

  // The step's scalars and the master and compute shards, as the plan sized them (0: not
  // needed); the reducer allocates the gradients, buckets and scratch.
  scalars_ = allocate_planned(be_, d.scalars, "zero:step_scalars", true);
  shard_master_ = allocate_planned(be_, d.master_shard, "zero:master_shard", true);
  shard_compute_ = allocate_planned(be_, d.compute_shard, "zero:compute_shard");
  master_ = std::make_unique<DeviceMaster>(be_, opts_.states,
                                           policy_.optimizer_states ? shard_master_.as<float>() : buf_.master,
                                           shard_compute_.data(), groups_);
  if (host_) {
    // Updated host chunks go to the device's copy of the parameters: the compute shard
    // (16-bit runs), or the f32 master mirror that stages 1-3 gather from in f32 runs;
    // nowhere with --offload-param.
    void* device_params = opts_.offload_param ? nullptr
                          : low_precision()   ? shard_compute_.data()
                                              : static_cast<void*>(shard_master_.data());
    offload_ = std::make_unique<OffloadPipeline>(be_, *tiers_, plan_, *host_, device_params, stats_);
  }
  reducer_ = std::make_unique<GradientReducer>(be_, plan_, opts_, distributed() ? comm_ : nullptr, rank_, cs(),
                                               stream_ != nullptr, offload_.get(), stats_);
  reducer_->attach(model);

  // Stage 3: the coordinator allocates the persistent parameters, the gather arena, hpZ's
  // secondary partition and the fetched shards of --offload-param.
  if (policy_.parameters) {
    params_ = std::make_unique<ParamCoordinator>(be_, plan_, opts_, distributed() ? comm_ : nullptr, hpz_comm_.get(),
                                                 cs(), stream_ != nullptr, stats_);
    ParamCoordinator::Fetch fetch;
    if (opts_.offload_param)
      fetch = [this](int unit, int64_t lo, int64_t hi, void* dst) { offload_->fetch_to_device(unit, lo, hi, dst); };
    params_->attach(model, low_precision() ? shard_compute_.data() : shard_master_.data(), std::move(fetch),
                    tiers_ ? &tiers_->h2d() : nullptr);
  }

  state_ = std::make_unique<ShardState>(be_, plan_, rank_, *master_, *adam_, host_.get());

  // Nothing else may allocate here: strata plan reports the plan's sums.
  {
    const uint64_t dev = be_.budget().used() - device_before;
    const uint64_t host = tiers_ ? tiers_->budget(Tier::host).used() - host_before : 0;
    const uint64_t nvme = host_ && host_->nvme_file() ? host_->nvme_file()->capacity() : 0;
    STRATA_CHECK(dev == plan_.device_bytes() && host == plan_.host_bytes() && nvme == plan_.nvme_bytes(),
                 "ZeroEngine allocated device/host/NVMe " + std::to_string(dev) + "/" + std::to_string(host) + "/" +
                     std::to_string(nvme) + " bytes but its plan says " + std::to_string(plan_.device_bytes()) + "/" +
                     std::to_string(plan_.host_bytes()) + "/" + std::to_string(plan_.nvme_bytes()),
                 "this is a bug: every allocation of ZeroEngine::attach must come from plan_engine (strata plan "
                 "relies on it)");
  }

  // Initial master shard: from the model's full parameters, or unit by unit.
  const int64_t shard = lay.shard_elements();
  const size_t esz = dtype_size(buf_.compute_dtype);
  if (policy_.optimizer_states) {
    std::vector<float> unit(static_cast<size_t>(plan_.max_unit));  // one unit at a time, never the whole model
    std::vector<float> mine;                                       // this rank's slice of the unit
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
      const int64_t A = plan_.unit_shard_begin(u), B = plan_.unit_shard_end(u);
      mine.assign(size_t(B - A), 0.0f);
      for (int gi : plan_.unit_groups[size_t(u)]) {
        const SubGroup& g = lay.sub_groups()[size_t(gi)];
        const int64_t lo = std::min(g.count, int64_t(rank_) * g.shard),
                      hi = std::min(g.count, int64_t(rank_ + 1) * g.shard);
        if (hi > lo)
          std::memcpy(mine.data() + (lay.shard_offset(gi) - A), src + (g.flat_begin - model.unit_begin(u)) + lo,
                      size_t(hi - lo) * 4);
      }
      const int64_t split = std::clamp(plan_.host_begin, A, B);
      master_->write(A, split, mine.data());
      if (B > split) host_->write_master(split, B, mine.data() + (split - A));
    }
    if (host_) {
      host_->finish_init();
      // The device's copy of the host part: the f32 mirror, or the 16-bit compute shard.
      const int64_t most = int64_t(1) << 20;
      std::vector<float> part;
      std::vector<uint16_t> half;
      for (int64_t a = plan_.host_begin; !opts_.offload_param && a < shard; a += most) {
        const int64_t b = std::min<int64_t>(shard, a + most);
        part.resize(size_t(b - a));
        host_->read_master(a, b, part.data());
        if (!low_precision()) {
          be_.upload(shard_master_.as<float>() + a, part.data(), size_t(b - a) * 4);
        } else {
          half.resize(size_t(b - a));
          host::convert_from_f32(half.data(), buf_.compute_dtype, part.data(), size_t(b - a));
          be_.upload(static_cast<char*>(shard_compute_.data()) + size_t(a) * esz, half.data(), size_t(b - a) * esz);
        }
      }
    }
    if (low_precision() && shard_compute_.data() && !master_->bf16())  // a bf16 master is the compute shard
      be_.cast({shard_compute_.data(), buf_.compute_dtype, {plan_.host_begin}, Tier::device},
               {shard_master_.data(), DType::f32, {plan_.host_begin}, Tier::device});
    if (!policy_.parameters && !buf_.master) publish_params();  // fill the model's 16-bit copy
    if (params_) params_->publish_persistent();
    drain();  // the host's collectives may follow: none of the engine's may still be queued
  }
}

}  // namespace strata::zero
