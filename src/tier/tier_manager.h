// The tier manager: device memory, host RAM and NVMe as tiers of one memory.
//
// Each tier has a capacity budget (--device-mem, --host-mem); every partition is allocated
// through here with its home tier and registered by name, so a tier that would overflow is
// an error naming the tier, the budget and the request — never a silent spill. Transfers
// run on their own streams (device→host, host→device) through a pinned staging pool of a
// fixed number of fixed-size buffers, and the host's compute (CPU Adam) on a host stream;
// all of them are created once, so the steady-state step allocates nothing. The manager
// also keeps the step timeline: bytes moved per tier edge and busy seconds per engine.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata::tier {

enum class Edge { d2h, h2d, count };  // host<->NVMe: the NVMe store counts its own bytes
std::string_view edge_name(Edge e);

struct TierOptions {
  size_t host_bytes = size_t(64) << 30;     // --host-mem
  int staging_count = 4;                    // --pin-buffer-count
  size_t staging_bytes = size_t(16) << 20;  // --pin-buffer-size
  bool pin_staging = true;                  // page-lock the staging pool
  std::vector<int> host_cpus;               // CPUs for the host side's threads (empty: not bound)
};

struct PartitionInfo {
  std::string name;
  Tier home;
  size_t bytes;
};

// A fixed pool of page-locked host buffers for transfers. acquire() hands out a free
// buffer, waiting for the oldest buffer's release event when all are in use.
class StagingPool {
 public:
  StagingPool(Backend& be, int count, size_t bytes, bool pinned, MemoryBudget& host_budget);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  int count() const { return int(buffers_.size()); }
  size_t buffer_bytes() const { return bytes_; }
  size_t total_bytes() const { return bytes_ * buffers_.size(); }
  int acquire();  // thread-safe; waits while every buffer is taken
  void* data(int i) const { return buffers_[size_t(i)]; }
  // The buffer becomes free once `done` completes (the last work that reads or writes it).
  void release_after(int i, Event& done);

 private:
  Backend& be_;
  size_t bytes_;
  bool pinned_;
  MemoryBudget& budget_;
  std::vector<void*> buffers_;
  int take(int i);               // under mu_
  std::vector<Event*> pending_;  // per buffer: the last work on it once released (null: none)
  std::vector<uint8_t> taken_;   // per buffer: acquired and not yet released
  std::condition_variable released_;
  std::vector<uint64_t> order_;
  uint64_t clock_ = 0;
  std::mutex mu_;
};

class TierManager {
 public:
  TierManager(Backend& device, TierOptions options);
  ~TierManager();

  Backend& device() { return be_; }
  MemoryBudget& budget(Tier t);
  // Memory in tier t for a named partition (host memory is pinned when asked).
  Buffer allocate(Tier t, size_t bytes, const std::string& name, bool pinned = false);
  const std::vector<PartitionInfo>& partitions() const { return partitions_; }

  Stream& d2h() { return *d2h_; }
  Stream& h2d() { return *h2d_; }
  Stream& host() { return *host_; }          // CPU Adam
  Stream& host_sum() { return *host_sum_; }  // host-side gradient accumulation and norms
  // The four in pipeline order (d2h, host_sum, host, h2d): what draining the host side waits on.
  std::array<Stream*, 4> streams() { return {d2h_.get(), host_sum_.get(), host_.get(), h2d_.get()}; }
  StagingPool& staging() { return *staging_; }
  const TierOptions& options() const { return opts_; }

  // Bytes moved per edge (counted by whoever moves them; thread-safe).
  void count(Edge e, size_t bytes);
  uint64_t bytes(Edge e) const;

 private:
  Backend& be_;
  TierOptions opts_;
  MemoryBudget host_budget_;
  std::vector<PartitionInfo> partitions_;
  std::unique_ptr<Stream> d2h_, h2d_, host_, host_sum_;
  std::unique_ptr<StagingPool> staging_;
  std::unique_ptr<std::atomic<uint64_t>[]> edge_bytes_;
};

}  // namespace strata::tier
