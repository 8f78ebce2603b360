#include "zero/frozen_params.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "host/convert.h"

namespace strata::zero {

FrozenParams::FrozenParams(Backend& backend, Communicator* comm, const ZeroOptions& options, tier::TierManager* tiers,
                           Stream& work, bool own_stream, ZeroStats& stats)
    : be_(backend),
      comm_(comm),
      opts_(options),
      tiers_(tiers),
      work_(work),
      own_stream_(own_stream),
      stats_(stats),
      rank_(comm ? comm->rank() : 0) {
  STRATA_CHECK(!opts_.offload_param || tiers_, "frozen weights offloaded without a tier manager",
               "this is a bug in the caller");
}

FrozenParams::~FrozenParams() {
  // Fetches queued on the h2d stream read the home and the cache: let them finish first.
  if (tiers_) try {
      tiers_->h2d().synchronize();
    } catch (...) {
    }
}

io::NvmeQueue& FrozenParams::queue() {
  // One ring per thread that touches the file: the caller's at start-up, the h2d stream's after.
  const auto me = std::this_thread::get_id();
  for (auto& [id, q] : queues_)
    if (id == me) return *q;
  queues_.emplace_back(me, std::make_unique<io::NvmeQueue>(*file_));
  return *queues_.back().second;
}

void FrozenParams::write_home(int64_t lo, int64_t hi, const void* src) {
  const size_t esz = dtype_size(plan_.compute), bytes = size_t(hi - lo) * esz;
  if (!file_) {
    std::memcpy(static_cast<char*>(host_shard_.data()) + size_t(lo) * esz, src, bytes);
    return;
  }
  // The file takes whole blocks at block offsets (lo is aligned): straight from src when it is
  // aligned too, else through an aligned copy.
  const size_t block = file_->block_size(), len = size_t(file_->align(bytes));
  if (reinterpret_cast<uintptr_t>(src) % block == 0 && len == bytes) {
    const io::NvmeQueue::Op op{true, uint64_t(lo) * esz, const_cast<void*>(src), len};
    queue().run({&op, 1});
    return;
  }
  std::vector<char> scratch(len + block, 0);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(scratch.data()) + block - 1) / block * block);
  std::memcpy(aligned, src, bytes);
  const io::NvmeQueue::Op op{true, uint64_t(lo) * esz, aligned, len};
  queue().run({&op, 1});
}

void FrozenParams::read_home(int64_t lo, int64_t hi, void* dst) {
  const size_t esz = dtype_size(plan_.compute);
  const uint64_t want = uint64_t(hi - lo) * esz, bytes = file_->align(want), off = uint64_t(lo) * esz;
  const size_t block = file_->block_size();
  if (reinterpret_cast<uintptr_t>(dst) % block == 0 && bytes == want) {  // straight into dst
    const io::NvmeQueue::Op op{false, off, dst, size_t(bytes)};
    queue().run({&op, 1});
    return;
  }
  thread_local std::vector<char> scratch;
  scratch.resize(size_t(bytes) + block);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(scratch.data()) + block - 1) / block * block);
  const io::NvmeQueue::Op op{false, off, aligned, size_t(bytes)};
  queue().run({&op, 1});
  std::memcpy(dst, aligned, size_t(want));
}

void FrozenParams::attach(UnitModel& model, std::vector<ParamSpan> params, DType compute, bool embedding_in_backward,
                          const std::function<void(int unit, float* dst)>& fill) {
  const int world = comm_ ? comm_->size() : 1, units = model.num_units();
  const size_t device_before = be_.budget().used(), host_before = tiers_ ? tiers_->budget(Tier::host).used() : 0;
  {
    EnginePlanInput in{std::move(params), {}, world, compute, opts_, 0, 4096};
    in.frozen = true, in.embedding_in_backward = embedding_in_backward;
    for (int u = 0; u < units; ++u) in.unit_sizes.push_back(model.unit_count(u));
    if (tiers_) {
      in.staging_buffer_bytes = tiers_->staging().buffer_bytes();
      const MemoryBudget& host = tiers_->budget(Tier::host);
      in.host_free = host.capacity() - std::min(host.used(), host.capacity());
    }
    if (opts_.offload_param && opts_.nvme) {  // the file's regions align to its file system's direct-I/O block
      file_ =
          std::make_unique<io::NvmeFile>(opts_.nvme_options, "strata-rank" + std::to_string(rank_) + "-frozen.swap", 1);
      in.nvme_block = file_->block_size();
      file_.reset();
    }
    plan_ = plan_engine(in);
  }
  const PartitionLayout& lay = plan_.layout;
  const size_t esz = dtype_size(compute);
  device_shard_ = allocate_planned(be_, plan_.device.compute_shard, "zero:frozen_shard");
  if (plan_.host.compute > 0)
    host_shard_ = tiers_->allocate(Tier::host, plan_.host.compute, "host:frozen_params", true);
  if (plan_.host.nvme_bytes > 0)
    file_ = std::make_unique<io::NvmeFile>(opts_.nvme_options, "strata-rank" + std::to_string(rank_) + "-frozen.swap",
                                           plan_.host.nvme_bytes);
  coordinator_ = std::make_unique<ParamCoordinator>(be_, plan_, opts_, comm_, nullptr, work_, own_stream_, stats_);
  ParamCoordinator::Fetch fetch;
  if (file_) {
    fetch_ = std::make_unique<ParamFetch>(
        be_, *tiers_, plan_, [this](int64_t lo, int64_t hi, void* dst) { read_home(lo, hi, dst); }, stats_);
    fetch = [this](int unit, int64_t lo, int64_t hi, void* dst) { fetch_->fetch(unit, lo, hi, dst); };
  } else if (host_shard_.data()) {  // straight from the page-locked shard
    fetch = [this, esz](int, int64_t lo, int64_t hi, void* dst) {
      be_.copy_async(dst, static_cast<const char*>(host_shard_.data()) + size_t(lo) * esz, size_t(hi - lo) * esz,
                     tiers_->h2d());
      tiers_->count(tier::Edge::h2d, size_t(hi - lo) * esz);
    };
  }
  coordinator_->attach(model, device_shard_.data(), std::move(fetch), tiers_ ? &tiers_->h2d() : nullptr);
  {
    const uint64_t dev = be_.budget().used() - device_before;
    const uint64_t host = tiers_ ? tiers_->budget(Tier::host).used() - host_before : 0;
    const uint64_t nvme = file_ ? file_->capacity() : 0;
    STRATA_CHECK(dev == plan_.device_bytes() && host == plan_.host_bytes() && nvme == plan_.nvme_bytes(),
                 "the frozen weights allocated device/host/NVMe " + std::to_string(dev) + "/" + std::to_string(host) +
                     "/" + std::to_string(nvme) + " bytes but their plan says " + std::to_string(plan_.device_bytes()) +
                     "/" + std::to_string(plan_.host_bytes()) + "/" + std::to_string(plan_.nvme_bytes()),
                 "this is a bug: every allocation of FrozenParams::attach must come from plan_engine");
  }

  // This rank's shard, one unit at a time (never the whole model on the host): each sub-group's
  // slice rounded once into the unit's shard range, the padding zero.
  std::vector<float> unit(size_t(plan_.max_unit));
  std::vector<char> narrow_mem;  // block-aligned (4 KiB), so the NVMe file is written from it directly
  for (int u = 0; u < units; ++u) {
    if (plan_.unit_groups[size_t(u)].empty()) continue;
    fill(u, unit.data());
    const int64_t A = plan_.unit_shard_begin(u), B = plan_.unit_shard_end(u);
    narrow_mem.assign(size_t(B - A) * esz + 4096, 0);
    char* const narrow = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(narrow_mem.data()) + 4095) / 4096 * 4096);
    for (int gi : plan_.unit_groups[size_t(u)]) {
      const SubGroup& g = lay.sub_groups()[size_t(gi)];
      const int64_t lo = std::min(g.count, int64_t(rank_) * g.shard),
                    hi = std::min(g.count, int64_t(rank_ + 1) * g.shard);
      if (hi <= lo) continue;
      const float* from = unit.data() + (g.flat_begin - model.unit_begin(u)) + lo;
      char* to = narrow + size_t(lay.shard_offset(gi) - A) * esz;
      if (compute == DType::f32)
        std::memcpy(to, from, size_t(hi - lo) * 4);
      else
        host::convert_from_f32(to, compute, from, size_t(hi - lo));
    }
    if (device_shard_.data())
      be_.upload(static_cast<char*>(device_shard_.data()) + size_t(A) * esz, narrow, size_t(B - A) * esz);
    else
      write_home(A, B, narrow);
  }
  queues_.clear();  // the h2d stream's thread reads with a ring of its own
  // The persistent parameters, whole on every rank, once for the run.
  coordinator_->publish_persistent();
  work_.synchronize();
}

}  // namespace strata::zero
