// The host optimizer's states in an NVMe swap file: regions master | m | v (and the kept
// 16-bit parameters) per copy, read and written through io_uring. Each update swaps its
// chunk through a ring of three pinned slots: while Adam runs on chunk c, the read of chunk
// c+1 and the write of chunk c-1 are in flight. Ranges outside the step (start-up,
// checkpoints, export) go through a bounce buffer, a block at a time.
#pragma once
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backend/buffer.h"
#include "tier/tier_manager.h"
#include "zero/host_optimizer_sizes.h"
#include "zero/state_store.h"

namespace strata::zero {

class NvmeStateStore final : public StateStore {
 public:
  // `file` is sized for sizes.nvme_bytes; chunk_elements bounds a chunk (a slot holds one).
  NvmeStateStore(tier::TierManager& tm, const StoreShape& shape, std::unique_ptr<io::NvmeFile> file,
                 int64_t chunk_elements, const HostOptimizerSizes& sizes);
  ~NvmeStateStore() override;

  size_t bytes() const override { return swap_.bytes() + bounce_.bytes(); }
  const io::NvmeFile* nvme_file() const override { return file_.get(); }
  void set_faults(io::IoFaults* f) override { file_->set_faults(f); }
  // The narrowest state decides: lo · its size must fall on a block.
  int64_t alignment() const override;

  void write(HostState s, int copy, int64_t lo, int64_t hi, const float* src) override;
  void read(HostState s, int copy, int64_t lo, int64_t hi, float* dst) override;
  void read_compute(int copy, int64_t lo, int64_t hi, void* dst) override;
  void finish_init(int copy) override;
  ChunkStates begin_update(const HostChunk& c, const HostChunk* next, int src, int dst) override;
  void end_update(const HostChunk& c, int dst) override;
  void restore(const HostChunk& c, int copy, void* out) override;
  void flush() override;
  void drop_prefetches() override;

 private:
  struct Slot {  // one chunk's master, m, v (and parameters) in the swap buffer
    char *master = nullptr, *m = nullptr, *v = nullptr, *params = nullptr;
    int64_t lo = -1, hi = -1;
    uint64_t read_ticket = 0, write_ticket = 0;
  };
  io::NvmeQueue& queue();                        // this thread's ring on the swap file
  uint64_t offset(HostState s, int copy) const;  // the byte offset of a state's region
  void read_slot(Slot& slot, int copy, int64_t lo, int64_t hi, bool with_moments);
  int slot_for(int64_t lo);

  std::unique_ptr<io::NvmeFile> file_;
  uint64_t region_[3];
  Buffer swap_, bounce_;
  Slot slots_[3];
  int next_slot_ = 0, updating_ = -1;
  std::mutex queues_mu_;
  std::vector<std::pair<std::thread::id, std::unique_ptr<io::NvmeQueue>>> queues_;
};

}  // namespace strata::zero
