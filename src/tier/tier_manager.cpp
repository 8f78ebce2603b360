#include "tier/tier_manager.h"

#include <cstring>

#include "core/error.h"
#include "host/affinity.h"

namespace strata::tier {

std::string_view edge_name(Edge e) {
  switch (e) {
    case Edge::d2h:
      return "d2h";
    case Edge::h2d:
      return "h2d";
    case Edge::count:
      break;
  }
  return "?";
}

StagingPool::StagingPool(Backend& be, int count, size_t bytes, bool pinned, MemoryBudget& host_budget)
    : be_(be), bytes_((bytes + 4095) / 4096 * 4096), pinned_(pinned), budget_(host_budget) {
  STRATA_CHECK(count >= 2 && bytes >= 4096,
               "staging pool of " + std::to_string(count) + " × " + std::to_string(bytes) + " bytes",
               "--pin-buffer-count must be at least 2 and --pin-buffer-size at least 4KiB");
  for (int i = 0; i < count; ++i) {
    budget_.charge(bytes_, "'staging buffer " + std::to_string(i) + "'");
    try {
      buffers_.push_back(be_.host_allocate(bytes_, pinned_, "staging"));
    } catch (...) {
      budget_.release(bytes_);
      throw;
    }
  }
  pending_.assign(buffers_.size(), nullptr);
  taken_.assign(buffers_.size(), 0);
  order_.assign(buffers_.size(), 0);
}

StagingPool::~StagingPool() {
  for (void* p : buffers_) {
    be_.host_free(p, bytes_, pinned_);
    budget_.release(bytes_);
  }
}

int StagingPool::acquire() {
  std::unique_lock lock(mu_);
  for (;;) {
    // Free, or released with its last work done: take it. Otherwise the oldest released one,
    // once its work completes. A taken buffer (acquired, not yet released) is never waited on.
    int oldest = -1;
    for (int i = 0; i < count(); ++i) {
      if (taken_[size_t(i)]) continue;
      Event* e = pending_[size_t(i)];
      if (!e || e->ready()) return take(i);
      if (oldest < 0 || order_[size_t(i)] < order_[size_t(oldest)]) oldest = i;
    }
    if (oldest >= 0) {
      pending_[size_t(oldest)]->synchronize();
      return take(oldest);
    }
    released_.wait(lock);  // every buffer is taken: wait for a release
  }
}

int StagingPool::take(int i) {
  taken_[size_t(i)] = 1;
  pending_[size_t(i)] = nullptr;
  order_[size_t(i)] = ++clock_;
  return i;
}

void StagingPool::release_after(int i, Event& done) {
  {
    std::lock_guard lock(mu_);
    taken_[size_t(i)] = 0;
    pending_[size_t(i)] = &done;
    order_[size_t(i)] = ++clock_;
  }
  released_.notify_one();
}

TierManager::TierManager(Backend& device, TierOptions options)
    : be_(device),
      opts_(std::move(options)),
      host_budget_("host", opts_.host_bytes),
      edge_bytes_(new std::atomic<uint64_t>[size_t(Edge::count)]) {
  for (size_t i = 0; i < size_t(Edge::count); ++i) edge_bytes_[i] = 0;
  d2h_ = be_.make_stream("tier:d2h");
  h2d_ = be_.make_stream("tier:h2d");
  host_ = be_.make_stream("tier:host");
  host_sum_ = be_.make_stream("tier:host_sum");
  // The host side's threads run on the host CPUs (their OpenMP teams inherit the binding).
  for (Stream* s : {d2h_.get(), h2d_.get(), host_.get(), host_sum_.get()}) {
    s->launch_host([cpus = &opts_.host_cpus] { host::bind_this_thread(*cpus); });
    s->synchronize();
  }
  staging_ =
      std::make_unique<StagingPool>(be_, opts_.staging_count, opts_.staging_bytes, opts_.pin_staging, host_budget_);
  partitions_.push_back({"staging", Tier::host, staging_->total_bytes()});
}

TierManager::~TierManager() {
  for (Stream* s : {d2h_.get(), h2d_.get(), host_.get(), host_sum_.get()}) try {
      s->synchronize();
    } catch (...) {
    }
}

MemoryBudget& TierManager::budget(Tier t) {
  STRATA_CHECK(t != Tier::nvme, "the NVMe tier", "NVMe holds only the optimizer's swap files (--offload-* nvme)");
  return t == Tier::device ? be_.budget() : host_budget_;
}

Buffer TierManager::allocate(Tier t, size_t bytes, const std::string& name, bool pinned) {
  partitions_.push_back({name, t, bytes});
  if (t == Tier::device) return be_.allocate(bytes, name);
  STRATA_CHECK(t == Tier::host, "partition '" + name + "' on the NVMe tier",
               "NVMe holds only the optimizer's swap files (--offload-* nvme)");
  host_budget_.charge(bytes, "'" + name + "'");
  void* p = nullptr;
  try {
    p = be_.host_allocate(bytes, pinned, name);
  } catch (...) {
    host_budget_.release(bytes);
    throw;
  }
  return Buffer(p, bytes, Tier::host, name, [this, pinned](void* ptr, size_t n) {
    be_.host_free(ptr, n, pinned);
    host_budget_.release(n);
  });
}

void TierManager::count(Edge e, size_t bytes) { edge_bytes_[size_t(e)] += bytes; }
uint64_t TierManager::bytes(Edge e) const { return edge_bytes_[size_t(e)].load(); }

}  // namespace strata::tier
