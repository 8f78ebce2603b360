#include "zero/nvme_state_store.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "host/convert.h"

namespace strata::zero {

NvmeStateStore::NvmeStateStore(tier::TierManager& tm, const StoreShape& shape, std::unique_ptr<io::NvmeFile> file,
                               int64_t chunk_elements, const HostOptimizerSizes& sizes)
    : StateStore(shape), file_(std::move(file)), region_{sizes.region[0], sizes.region[1], sizes.region[2]} {
  const size_t ce = size_t(chunk_elements), slot = size_t(sizes.swap / 3);
  STRATA_CHECK(
      sizes.swap == 3 * ce * (shape.size(HostState::master) + 2 * shape.size(HostState::m) + dtype_size(shape.compute)),
      "NvmeStateStore: " + std::to_string(sizes.swap) + " bytes of swap slots for chunks of " +
          std::to_string(chunk_elements) + " elements",
      "this is a bug: host_optimizer_sizes and the slot layout disagree");
  swap_ = tm.allocate(Tier::host, sizes.swap, "host:nvme_swap", true);
  for (int s = 0; s < 3; ++s) {
    char* base = static_cast<char*>(swap_.data()) + size_t(s) * slot;
    slots_[s].master = base;
    slots_[s].m = slots_[s].master + ce * shape.size(HostState::master);
    slots_[s].v = slots_[s].m + ce * shape.size(HostState::m);
    slots_[s].params = slots_[s].v + ce * shape.size(HostState::v);
  }
  bounce_ = tm.allocate(Tier::host, sizes.bounce, "host:nvme_bounce", true);
}

NvmeStateStore::~NvmeStateStore() {
  std::lock_guard lock(queues_mu_);
  queues_.clear();  // rings drain before the file closes
}

io::NvmeQueue& NvmeStateStore::queue() {
  // One ring per thread that touches the file (io_uring is single-issuer here).
  std::lock_guard lock(queues_mu_);
  const auto me = std::this_thread::get_id();
  for (auto& [id, q] : queues_)
    if (id == me) return *q;
  auto q = std::make_unique<io::NvmeQueue>(*file_);
  const iovec regs[2] = {{swap_.data(), swap_.bytes()}, {bounce_.data(), bounce_.bytes()}};
  q->register_buffers(regs);
  queues_.emplace_back(me, std::move(q));
  return *queues_.back().second;
}

uint64_t NvmeStateStore::offset(HostState s, int copy) const {
  const uint64_t per_copy = region_[0] + 2 * region_[1] + region_[2];
  const uint64_t within = s == HostState::master ? 0
                          : s == HostState::m    ? region_[0]
                          : s == HostState::v    ? region_[0] + region_[1]
                                                 : region_[0] + 2 * region_[1];
  return uint64_t(copy) * per_copy + within;
}

int64_t NvmeStateStore::alignment() const {
  return int64_t(file_->block_size() / std::min(shape_.size(HostState::master), shape_.size(HostState::m)));
}

void NvmeStateStore::write(HostState s, int copy, int64_t lo, int64_t hi, const float* src) {
  // Through the bounce buffer (the source need not be aligned), chunk by chunk. Only the
  // thread that owns the bounce buffer uses it: start-up, checkpoints and export run on the
  // compute thread with the host's work drained.
  const DType dt = shape_.dtype(s);
  const size_t sz = dtype_size(dt);
  const int64_t most = int64_t(bounce_.bytes() / 4);
  for (int64_t a = lo; a < hi; a += most) {
    const int64_t n = std::min(most, hi - a);
    const size_t bytes = file_->align(uint64_t(n) * sz);
    std::memset(bounce_.data(), 0, bytes);
    host::convert_from_f32(bounce_.data(), dt, src + (a - lo), size_t(n));
    const io::NvmeQueue::Op op{true, offset(s, copy) + uint64_t(a - shape_.begin) * sz, bounce_.data(), bytes};
    queue().run({&op, 1});
  }
}

void NvmeStateStore::read(HostState s, int copy, int64_t lo, int64_t hi, float* dst) {
  const DType dt = shape_.dtype(s);
  const size_t sz = dtype_size(dt);
  const int64_t most = int64_t(bounce_.bytes() / 4);
  for (int64_t a = lo; a < hi; a += most) {
    const int64_t n = std::min(most, hi - a);
    const io::NvmeQueue::Op op{false, offset(s, copy) + uint64_t(a - shape_.begin) * sz, bounce_.data(),
                               file_->align(uint64_t(n) * sz)};
    queue().run({&op, 1});
    host::convert_to_f32(dst + (a - lo), bounce_.data(), dt, size_t(n));
  }
}

void NvmeStateStore::read_compute(int copy, int64_t lo, int64_t hi, void* dst) {
  // From the kept parameters' region, or the master's where it is in the compute dtype (f32
  // runs, a bf16 master). Straight into dst when it is block-aligned (the parameter cache),
  // else through a per-thread aligned scratch: fetches run on the host→device stream,
  // persistent publishes on the communication stream.
  const size_t esz = dtype_size(shape_.compute);
  const uint64_t off =
      offset(shape_.keep ? HostState::params : HostState::master, copy) + uint64_t(lo - shape_.begin) * esz;
  const uint64_t want = uint64_t(hi - lo) * esz, bytes = file_->align(want);
  const size_t block = file_->block_size();
  if (reinterpret_cast<uintptr_t>(dst) % block == 0 && bytes == want) {
    const io::NvmeQueue::Op op{false, off, dst, bytes};
    queue().run({&op, 1});
    return;
  }
  thread_local std::vector<char> scratch;
  scratch.resize(bytes + block);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(scratch.data()) + block - 1) / block * block);
  const io::NvmeQueue::Op op{false, off, aligned, bytes};
  queue().run({&op, 1});
  std::memcpy(dst, aligned, size_t(want));
}

void NvmeStateStore::finish_init(int copy) {
  if (!shape_.keep) return;
  // The kept parameters from the (f32) master, one bounce-sized piece at a time.
  const size_t esz = dtype_size(shape_.compute), block = file_->block_size();
  const int64_t most = int64_t(bounce_.bytes() / 4);
  std::vector<char> half(size_t(most) * esz + block);
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(half.data()) + block - 1) / block * block);
  for (int64_t a = shape_.begin; a < shape_.end; a += most) {
    const int64_t k = std::min(most, shape_.end - a);
    queue().run(std::vector<io::NvmeQueue::Op>{{false, offset(HostState::master, copy) + uint64_t(a - shape_.begin) * 4,
                                                bounce_.data(), file_->align(uint64_t(k) * 4)}});
    host::convert_from_f32(aligned, shape_.compute, bounce_.as<float>(), size_t(k));
    queue().run(
        std::vector<io::NvmeQueue::Op>{{true, offset(HostState::params, copy) + uint64_t(a - shape_.begin) * esz,
                                        aligned, file_->align(uint64_t(k) * esz)}});
  }
}

int NvmeStateStore::slot_for(int64_t lo) {
  for (int s = 0; s < 3; ++s)
    if (slots_[s].lo == lo) return s;
  return -1;
}

void NvmeStateStore::read_slot(Slot& s, int copy, int64_t lo, int64_t hi, bool with_moments) {
  queue().wait(s.write_ticket);  // never overwrite a buffer that is still being written out
  s.lo = lo, s.hi = hi;
  const uint64_t n = uint64_t(hi - lo), i = uint64_t(lo - shape_.begin);
  const uint64_t msz = shape_.size(HostState::master), ssz = shape_.size(HostState::m);
  // On the stack: the step allocates nothing.
  const io::NvmeQueue::Op ops[3] = {{false, offset(HostState::master, copy) + i * msz, s.master, file_->align(n * msz)},
                                    {false, offset(HostState::m, copy) + i * ssz, s.m, file_->align(n * ssz)},
                                    {false, offset(HostState::v, copy) + i * ssz, s.v, file_->align(n * ssz)}};
  s.read_ticket = queue().start({ops, size_t(with_moments ? 3 : 1)});
}

ChunkStates NvmeStateStore::begin_update(const HostChunk& c, const HostChunk* next, int src, int) {
  // This chunk's states (prefetched by the previous update, or read now), then the next
  // chunk's read started; Adam updates the slot in place.
  int s = slot_for(c.lo);
  if (s < 0) {
    s = next_slot_;
    next_slot_ = (next_slot_ + 1) % 3;
    read_slot(slots_[s], src, c.lo, c.hi, true);
  }
  Slot& cur = slots_[s];
  queue().wait(cur.read_ticket);
  if (next && slot_for(next->lo) < 0) {
    int n = next_slot_;
    if (n == s) n = (n + 1) % 3;
    next_slot_ = (n + 1) % 3;
    read_slot(slots_[n], src, next->lo, next->hi, true);
  }
  updating_ = s;
  const ChunkPointers p{cur.master, cur.m, cur.v};
  return {p, p, shape_.keep ? cur.params : nullptr};
}

void NvmeStateStore::end_update(const HostChunk& c, int dst) {
  // The write-back to copy dst starts; the slot's contents are this step's result, not a
  // prefetch.
  Slot& cur = slots_[updating_];
  const uint64_t n = uint64_t(c.hi - c.lo), i = uint64_t(c.lo - shape_.begin);
  const uint64_t msz = shape_.size(HostState::master), ssz = shape_.size(HostState::m),
                 esz = dtype_size(shape_.compute);
  const io::NvmeQueue::Op ops[4] = {
      {true, offset(HostState::master, dst) + i * msz, cur.master, file_->align(n * msz)},
      {true, offset(HostState::m, dst) + i * ssz, cur.m, file_->align(n * ssz)},
      {true, offset(HostState::v, dst) + i * ssz, cur.v, file_->align(n * ssz)},
      {true, offset(HostState::params, dst) + i * esz, cur.params, file_->align(n * esz)}};
  cur.write_ticket = queue().start({ops, size_t(shape_.keep ? 4 : 3)});
  cur.lo = -1;
  updating_ = -1;
}

void NvmeStateStore::restore(const HostChunk& c, int copy, void* out) {
  // The kept parameters have a committed region of their own: only the device's copy needs
  // restoring, from the committed master.
  if (!out) return;
  Slot& s = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % 3;
  read_slot(s, copy, c.lo, c.hi, false);
  queue().wait(s.read_ticket);
  shape_.master_to_compute(out, s.master, c.hi - c.lo);
  s.lo = -1;
}

void NvmeStateStore::flush() {
  io::NvmeQueue& q = queue();
  q.wait(q.last_ticket());
  for (Slot& s : slots_) s.lo = -1;
}

void NvmeStateStore::drop_prefetches() {
  for (Slot& s : slots_) s.lo = -1;
}

}  // namespace strata::zero
