#include "zero/host_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "cpu/convert.h"
#include "zero/bucket_plan.h"

namespace strata::zero {

HostOptimizerSizes host_optimizer_sizes(int64_t elements, DType compute_dtype, bool keep_compute, bool speculative,
                                        bool nvme, int64_t chunk_elements, uint64_t nvme_block,
                                        const StateFormat& format, int64_t f32_master_elements) {
  const uint64_t n = uint64_t(std::max<int64_t>(elements, 0)), esz = dtype_size(compute_dtype);
  const uint64_t msz = format.master_bytes(), ssz = format.moment_bytes();
  HostOptimizerSizes z;
  // A bf16 master is the bf16 parameters: nothing to keep beside it.
  z.keep = keep_compute && compute_dtype != DType::f32 && format.master != compute_dtype;
  z.copies = speculative || nvme ? 2 : 1;
  z.grads = n * esz;
  if (format.master != DType::f32) z.f32_master_elements = std::max<int64_t>(f32_master_elements, 0);
  if (nvme) {
    const auto round_up = [&](uint64_t b) { return (b + nvme_block - 1) / nvme_block * nvme_block; };
    z.region[0] = round_up(n * msz);
    z.region[1] = round_up(n * ssz);
    z.region[2] = z.keep ? round_up(n * esz) : 0;
    z.nvme_bytes = uint64_t(z.copies) * (z.region[0] + 2 * z.region[1] + z.region[2]);
    z.swap = 3 * uint64_t(chunk_elements) * (msz + 2 * ssz + esz);  // a slot: one chunk's master, m, v, parameters
    z.bounce = uint64_t(chunk_elements) * 4;
  } else {
    z.states = uint64_t(z.copies) * (msz + 2 * ssz) * n;
    z.compute = z.keep ? n * esz : 0;
  }
  return z;
}

namespace {

// Zero-fills a state buffer with the CPU Adam's tile partition (first touch by the thread
// that streams it); an odd count of 16-bit elements is zeroed plainly.
void touch_state(Buffer& b, const cpu::AdamOptions& o) {
  if (b.bytes() % 4 == 0)
    cpu::first_touch_zero(b.as<float>(), int64_t(b.bytes() / 4), o);
  else
    b.zero();
}

}  // namespace

HostOptimizer::HostOptimizer(tier::TierManager& tm, int64_t begin, int64_t end, std::span<const AdamW::Group> groups,
                             AdamWConfig config, bool speculative, DType compute_dtype, bool keep_compute,
                             const io::NvmeOptions* nvme, int rank, int64_t chunk_elements, const StateFormat& format,
                             int64_t f32_master_room)
    : cfg_(config), fmt_(format), begin_(begin), end_(end), speculative_(speculative), compute_dtype_(compute_dtype) {
  STRATA_CHECK(fmt_.master == DType::f32 || fmt_.master == compute_dtype,
               "HostOptimizer: a " + std::string(dtype_name(fmt_.master)) + " master with " +
                   std::string(dtype_name(compute_dtype)) + " compute",
               "this is a bug in the caller: plan_engine refuses it");
  for (const AdamW::Group& g : groups) {
    const int64_t lo = std::max(g.offset, begin), hi = std::min(g.offset + g.count, end);
    if (hi > lo) groups_.push_back({lo - begin, hi - lo, g.decay, g.index + (lo - g.offset)});
  }
  int64_t kept32 = 0;
  for (const AdamW::Group& g : groups_) {
    const bool own = fmt_.master != DType::f32 && fmt_.master_of(g.decay) == DType::f32;
    f32_at_.push_back(own ? kept32 : -1);
    kept32 += own ? g.count : 0;
  }
  STRATA_CHECK(kept32 <= std::max<int64_t>(f32_master_room, 0),
               "HostOptimizer: " + std::to_string(kept32) + " f32 masters beside the bf16 one, room for " +
                   std::to_string(f32_master_room),
               "this is a bug in the engine plan: it counts them per rank");
  // Gradients in the run's gradient dtype (the compute dtype), accumulated with the same
  // rounding as on the device, so offloaded and device runs agree (and f16 overflow shows).
  // Two copies of the states when speculating, and always on NVMe: a step's writes go to the
  // copy that is not committed, so a failed write leaves the last completed step's state intact.
  two_copies_ = speculative || nvme;
  if (nvme) {
    // The swap file is sized once its block size is known: made small first, then re-made.
    file_ = std::make_unique<io::NvmeFile>(*nvme, "strata-rank" + std::to_string(rank) + ".swap", 1);
    const size_t block = file_->block_size();
    file_.reset();
    STRATA_CHECK(chunk_elements > 0 && size_t(chunk_elements) * 2 % block == 0,
                 "NVMe swap chunks of " + std::to_string(chunk_elements) + " elements",
                 "this is a bug in the engine: chunks must be block-aligned");
    sizes_ = host_optimizer_sizes(end - begin, compute_dtype, keep_compute, speculative, true, chunk_elements, block,
                                  fmt_, f32_master_room);
    file_ = std::make_unique<io::NvmeFile>(*nvme, "strata-rank" + std::to_string(rank) + ".swap", sizes_.nvme_bytes);
  } else {
    sizes_ = host_optimizer_sizes(end - begin, compute_dtype, keep_compute, speculative, false, chunk_elements, 0, fmt_,
                                  f32_master_room);
  }
  grads_ = tm.allocate(Tier::host, sizes_.grads, "host:grads");
  grads_.zero();
  if (sizes_.f32_master_elements > 0)
    for (int c = 0; c < sizes_.copies; ++c) {
      f32_master_[c] =
          tm.allocate(Tier::host, size_t(sizes_.f32_master_elements) * 4,
                      sizes_.copies > 1 ? (c ? "host:master_f32:b" : "host:master_f32:a") : "host:master_f32");
      f32_master_[c].zero();
    }
  if (nvme) {
    const size_t slot = size_t(sizes_.swap / 3);
    swap_ = tm.allocate(Tier::host, sizes_.swap, "host:nvme_swap", true);
    for (int s = 0; s < 3; ++s) {
      char* base = static_cast<char*>(swap_.data()) + size_t(s) * slot;
      const size_t ce = size_t(chunk_elements);
      slots_[s].master = base;
      slots_[s].m = slots_[s].master + ce * size_of(0);
      slots_[s].v = slots_[s].m + ce * size_of(1);
      slots_[s].params = slots_[s].v + ce * size_of(2);
    }
    bounce_ = tm.allocate(Tier::host, sizes_.bounce, "host:nvme_bounce", true);
    return;
  }
  const size_t n = size_t(std::max<int64_t>(end - begin, 0));
  for (int c = 0; c < sizes_.copies; ++c) {
    const std::string tag = sizes_.copies > 1 ? (c ? ":b" : ":a") : "";
    master_[c] = tm.allocate(Tier::host, n * size_of(0), "host:master" + tag);
    m_[c] = tm.allocate(Tier::host, n * size_of(1), "host:adam_m" + tag);
    v_[c] = tm.allocate(Tier::host, n * size_of(2), "host:adam_v" + tag);
    for (Buffer* b : {&m_[c], &v_[c], &master_[c]}) touch_state(*b, cfg_.kernel);
  }
  if (sizes_.compute > 0) {
    compute_ = tm.allocate(Tier::host, sizes_.compute, "host:params_compute");
    compute_.zero();
  }
}

HostOptimizer::~HostOptimizer() {
  std::lock_guard lock(queues_mu_);
  queues_.clear();  // rings drain before the file closes
}

size_t HostOptimizer::bytes() const {
  size_t b = grads_.bytes() + compute_.bytes() + swap_.bytes() + bounce_.bytes();
  for (int c = 0; c < 2; ++c) b += master_[c].bytes() + m_[c].bytes() + v_[c].bytes() + f32_master_[c].bytes();
  return b;
}

io::NvmeQueue& HostOptimizer::queue() {
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

uint64_t HostOptimizer::region(int kind, int copy) const {
  const uint64_t* r = sizes_.region;
  const uint64_t per_copy = r[0] + 2 * r[1] + r[2];
  const uint64_t within = kind == 0 ? 0 : r[0] + uint64_t(std::min(kind, 3) - 1) * r[1];
  return uint64_t(copy) * per_copy + within;
}

void HostOptimizer::master_to_compute(void* dst, const void* master, int64_t n) const {
  if (fmt_.master == compute_dtype_)
    std::memcpy(dst, master, size_t(n) * dtype_size(compute_dtype_));
  else  // an f32 master (a bf16 one comes only with bf16 compute)
    cpu::convert_from_f32(dst, compute_dtype_, static_cast<const float*>(master), size_t(n));
}

// ---- the committed master and parameters, by range (start-up, export, fetches)

int64_t HostOptimizer::alignment() const {
  // The narrowest state decides: lo · its size must fall on a block.
  return file_ ? int64_t(file_->block_size() / std::min(size_of(0), size_of(1))) : 1;
}

template <typename F>
void HostOptimizer::each_f32_master(int64_t lo, int64_t hi, F&& f) const {
  for (size_t k = 0; k < groups_.size(); ++k) {
    const int64_t g0 = groups_[k].offset + begin_;
    const int64_t a = std::max(g0, lo), b = std::min(g0 + groups_[k].count, hi);
    if (f32_at_[k] >= 0 && b > a) f(k, a, b);
  }
}

void HostOptimizer::store_f32_masters(int64_t lo, int64_t hi, const float* values) {
  float* kept = f32_master_[cur_].as<float>();
  each_f32_master(lo, hi, [&](size_t k, int64_t a, int64_t b) {
    std::memcpy(kept + f32_at_[k] + (a - groups_[k].offset - begin_), values + (a - lo), size_t(b - a) * 4);
  });
}

void HostOptimizer::load_f32_masters(int64_t lo, int64_t hi, float* values) const {
  const float* kept = f32_master_[cur_].as<float>();
  each_f32_master(lo, hi, [&](size_t k, int64_t a, int64_t b) {
    std::memcpy(values + (a - lo), kept + f32_at_[k] + (a - groups_[k].offset - begin_), size_t(b - a) * 4);
  });
}

void HostOptimizer::write_state(int kind, int64_t lo, int64_t hi, const float* src) {
  Buffer* ram = kind == 0 ? master_ : kind == 1 ? m_ : v_;
  const DType dt = dtype_of(kind);
  const size_t sz = dtype_size(dt);
  // The f32 masters beside a bf16 one take the values as they are; the bf16 master (below)
  // their rounding to nearest, as it holds after every update.
  if (kind == 0) store_f32_masters(lo, hi, src);
  if (!file_) {  // f32 is copied; bf16 is rounded to nearest (a widened bf16 comes back exactly)
    cpu::convert_from_f32(static_cast<char*>(ram[cur_].data()) + size_t(lo - begin_) * sz, dt, src, size_t(hi - lo));
    return;
  }
  // Through the bounce buffer (the source need not be aligned), chunk by chunk. Only the
  // thread that owns bounce_ uses it: start-up, checkpoints and export run on the compute
  // thread with the host's work drained.
  const int64_t most = int64_t(bounce_.bytes() / 4);
  for (int64_t a = lo; a < hi; a += most) {
    const int64_t n = std::min(most, hi - a);
    const size_t bytes = file_->align(uint64_t(n) * sz);
    std::memset(bounce_.data(), 0, bytes);
    cpu::convert_from_f32(bounce_.data(), dt, src + (a - lo), size_t(n));
    const io::NvmeQueue::Op op{true, region(kind, cur_) + uint64_t(a - begin_) * sz, bounce_.data(), bytes};
    queue().run({&op, 1});
  }
}

void HostOptimizer::read_committed(int kind, int64_t lo, int64_t hi, float* dst) {
  Buffer* ram = kind == 0 ? master_ : kind == 1 ? m_ : v_;
  const DType dt = dtype_of(kind);
  const size_t sz = dtype_size(dt);
  if (!file_) {
    cpu::convert_to_f32(dst, static_cast<const char*>(ram[cur_].data()) + size_t(lo - begin_) * sz, dt,
                        size_t(hi - lo));
    if (kind == 0) load_f32_masters(lo, hi, dst);
    return;
  }
  const int64_t most = int64_t(bounce_.bytes() / 4);
  for (int64_t a = lo; a < hi; a += most) {
    const int64_t n = std::min(most, hi - a);
    const io::NvmeQueue::Op op{false, region(kind, cur_) + uint64_t(a - begin_) * sz, bounce_.data(),
                               file_->align(uint64_t(n) * sz)};
    queue().run({&op, 1});
    cpu::convert_to_f32(dst + (a - lo), bounce_.data(), dt, size_t(n));
  }
  if (kind == 0) load_f32_masters(lo, hi, dst);
}

void HostOptimizer::read_compute(int64_t lo, int64_t hi, void* dst) {
  const size_t esz = dtype_size(compute_dtype_);
  if (!file_) {
    if (compute_.data())
      std::memcpy(dst, static_cast<const char*>(compute_.data()) + size_t(lo - begin_) * esz, size_t(hi - lo) * esz);
    else
      master_to_compute(dst, static_cast<const char*>(master_[cur_].data()) + size_t(lo - begin_) * size_of(0),
                        hi - lo);
    return;
  }
  // From the kept parameters' committed region, or the master's where it is in the compute
  // dtype (f32 runs, a bf16 master). Straight into dst when it is block-aligned (the
  // parameter cache), else through a per-thread aligned scratch: fetches run on the
  // host→device stream, persistent publishes on the communication stream.
  const uint64_t off = region(sizes_.keep ? 3 : 0, cur_) + uint64_t(lo - begin_) * esz;
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

void HostOptimizer::finish_init() {
  const size_t n = size_t(end_ - begin_);
  if (!file_) {
    if (compute_.data()) cpu::convert_parallel(compute_.data(), compute_dtype_, master_[cur_].data(), fmt_.master, n);
    return;
  }
  if (!sizes_.keep) return;
  // The kept parameters from the master, one bounce-sized piece at a time.
  const size_t esz = dtype_size(compute_dtype_);
  const int64_t most = int64_t(bounce_.bytes() / 4);
  std::vector<char> half(size_t(most) * esz + file_->block_size());
  char* aligned = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(half.data()) + file_->block_size() - 1) /
                                          file_->block_size() * file_->block_size());
  for (int64_t a = begin_; a < end_; a += most) {
    const int64_t k = std::min(most, end_ - a);
    queue().run(std::vector<io::NvmeQueue::Op>{
        {false, region(0, cur_) + uint64_t(a - begin_) * 4, bounce_.data(), file_->align(uint64_t(k) * 4)}});
    cpu::convert_from_f32(aligned, compute_dtype_, bounce_.as<float>(), size_t(k));
    queue().run(std::vector<io::NvmeQueue::Op>{
        {true, region(3, cur_) + uint64_t(a - begin_) * esz, aligned, file_->align(uint64_t(k) * esz)}});
  }
}

// ---- the step

double HostOptimizer::accumulate(const HostChunk& c, const float* g, bool first) {
  const size_t esz = dtype_size(compute_dtype_);
  char* acc = static_cast<char*>(grads_.data()) + size_t(c.lo - begin_) * esz;
  accumulate_into(acc, compute_dtype_, g, c.hi - c.lo, !first);
  return sum_squares_serial(acc, compute_dtype_, c.hi - c.lo);
}

// AdamW over the groups' parts in [lo, hi) (shard offsets); every pointer is the chunk's
// element lo, in its state's dtype. Writes the copy-out to `out` (chunk-relative) when given.
bool HostOptimizer::adam(States st, States in, int64_t lo, int64_t hi, float lr, float grad_scale, int64_t t,
                         void* out) {
  const size_t esz = dtype_size(compute_dtype_), msz = size_of(0), ssz = size_of(1);
  const bool master16 = fmt_.master != DType::f32, moments16 = fmt_.moments != DType::f32;
  const auto at = [](void* p, int64_t i, size_t sz) -> void* { return static_cast<char*>(p) + size_t(i) * sz; };
  bool nonfinite = false;
  for (size_t k = 0; k < groups_.size(); ++k) {
    const AdamW::Group& g = groups_[k];
    const int64_t a = std::max(g.offset + begin_, lo), b = std::min(g.offset + begin_ + g.count, hi);
    if (b <= a) continue;
    const int64_t i = a - lo;
    cpu::AdamTensors ts;
    if (f32_at_[k] >= 0) {  // an f32 master beside the bf16 one, which gets its rounding to nearest
      const int64_t j = f32_at_[k] + (a - g.offset - begin_);
      ts.param = st.f32_master + j, ts.param_in = in.f32_master + j;
      ts.out_dtype = fmt_.master, ts.param_out = at(st.master, i, msz);
    } else if (master16) {
      ts.param16 = static_cast<uint16_t*>(at(st.master, i, msz));
      ts.param16_in = static_cast<const uint16_t*>(at(in.master, i, msz));
    } else {
      ts.param = static_cast<float*>(at(st.master, i, msz)), ts.param_in = static_cast<float*>(at(in.master, i, msz));
    }
    if (moments16) {
      ts.m16 = static_cast<uint16_t*>(at(st.m, i, ssz)), ts.v16 = static_cast<uint16_t*>(at(st.v, i, ssz));
      ts.m16_in = static_cast<uint16_t*>(at(in.m, i, ssz)), ts.v16_in = static_cast<uint16_t*>(at(in.v, i, ssz));
    } else {
      ts.m = static_cast<float*>(at(st.m, i, ssz)), ts.v = static_cast<float*>(at(st.v, i, ssz));
      ts.m_in = static_cast<float*>(at(in.m, i, ssz)), ts.v_in = static_cast<float*>(at(in.v, i, ssz));
    }
    ts.grad = static_cast<const char*>(grads_.data()) + size_t(a - begin_) * esz;
    ts.grad_dtype = compute_dtype_;
    ts.n = b - a;
    // The rounding's randomness: the run's seed, the step and the model-flat index, so any
    // shard, tile or resumed run rounds an element the same way.
    ts.stochastic = fmt_.stochastic, ts.seed = fmt_.seed;
    ts.index_base = g.index + (a - (g.offset + begin_));
    if (compute_dtype_ != fmt_.master && out)
      ts.out_dtype = compute_dtype_, ts.param_out = static_cast<char*>(out) + size_t(i) * esz;
    const cpu::AdamHyper h{lr,   cfg_.beta1,           cfg_.beta2, cfg_.eps,  g.decay ? cfg_.weight_decay : 0.0f,
                           true, cfg_.bias_correction, t,          grad_scale};
    nonfinite |= cpu::adam_step(ts, h, cfg_.kernel);
  }
  // Padding is in no group; where the master is in the compute dtype (f32 runs, a bf16
  // master) the copy-out is the master itself.
  if (out && compute_dtype_ == fmt_.master) std::memcpy(out, st.master, size_t(hi - lo) * esz);
  return nonfinite;
}

int HostOptimizer::slot_for(int64_t lo) {
  for (int s = 0; s < 3; ++s)
    if (slots_[s].lo == lo) return s;
  return -1;
}

void HostOptimizer::read_state(Slot& s, int copy, int64_t lo, int64_t hi, bool with_state) {
  queue().wait(s.write_ticket);  // never overwrite a buffer that is still being written out
  s.lo = lo, s.hi = hi;
  const uint64_t n = uint64_t(hi - lo), i = uint64_t(lo - begin_), msz = size_of(0), ssz = size_of(1);
  // On the stack: the step allocates nothing.
  const io::NvmeQueue::Op ops[3] = {{false, region(0, copy) + i * msz, s.master, file_->align(n * msz)},
                                    {false, region(1, copy) + i * ssz, s.m, file_->align(n * ssz)},
                                    {false, region(2, copy) + i * ssz, s.v, file_->align(n * ssz)}};
  s.read_ticket = queue().start({ops, size_t(with_state ? 3 : 1)});
}

bool HostOptimizer::update(const HostChunk& c, const HostChunk* next, float lr, float grad_scale, int64_t t,
                           void* out) {
  const int src = cur_, dst = two_copies_ ? 1 - cur_ : cur_;
  const size_t esz = dtype_size(compute_dtype_);
  if (!file_) {
    const size_t i = size_t(c.lo - begin_), msz = size_of(0), ssz = size_of(1);
    void* copy_out = compute_.data() ? static_cast<char*>(compute_.data()) + i * esz : out;
    const auto state = [&](int copy) {
      return States{static_cast<char*>(master_[copy].data()) + i * msz, static_cast<char*>(m_[copy].data()) + i * ssz,
                    static_cast<char*>(v_[copy].data()) + i * ssz, f32_masters(copy)};
    };
    const bool bad = adam(state(dst), state(src), c.lo, c.hi, lr, grad_scale, t, copy_out);
    if (out && compute_.data()) std::memcpy(out, copy_out, size_t(c.hi - c.lo) * esz);
    return bad;
  }
  // NVMe: this chunk's state (prefetched by the previous update, or read now), the next
  // chunk's read started, Adam in the swap buffer, then the write-back started.
  int s = slot_for(c.lo);
  if (s < 0) {
    s = next_slot_;
    next_slot_ = (next_slot_ + 1) % 3;
    read_state(slots_[s], src, c.lo, c.hi, true);
  }
  Slot& cur = slots_[s];
  queue().wait(cur.read_ticket);
  if (next && slot_for(next->lo) < 0) {
    int n = next_slot_;
    if (n == s) n = (n + 1) % 3;
    next_slot_ = (n + 1) % 3;
    read_state(slots_[n], src, next->lo, next->hi, true);
  }
  void* copy_out = sizes_.keep ? cur.params : out;
  // The chunk's slot is read and written in place; the f32 masters (in RAM) go copy to copy.
  const bool bad = adam(States{cur.master, cur.m, cur.v, f32_masters(dst)},
                        States{cur.master, cur.m, cur.v, f32_masters(src)}, c.lo, c.hi, lr, grad_scale, t, copy_out);
  if (out && sizes_.keep) std::memcpy(out, cur.params, size_t(c.hi - c.lo) * esz);
  const uint64_t n = uint64_t(c.hi - c.lo), i = uint64_t(c.lo - begin_), msz = size_of(0), ssz = size_of(1);
  const io::NvmeQueue::Op ops[4] = {{true, region(0, dst) + i * msz, cur.master, file_->align(n * msz)},
                                    {true, region(1, dst) + i * ssz, cur.m, file_->align(n * ssz)},
                                    {true, region(2, dst) + i * ssz, cur.v, file_->align(n * ssz)},
                                    {true, region(3, dst) + i * esz, cur.params, file_->align(n * esz)}};
  cur.write_ticket = queue().start({ops, size_t(sizes_.keep ? 4 : 3)});
  cur.lo = -1;  // its contents are this step's result, not a prefetch
  return bad;
}

void HostOptimizer::restore(const HostChunk& c, void* out) {
  const size_t esz = dtype_size(compute_dtype_);
  const int64_t n = c.hi - c.lo;
  if (!file_) {
    const char* m = static_cast<const char*>(master_[cur_].data()) + size_t(c.lo - begin_) * size_of(0);
    if (compute_.data()) {
      char* dst = static_cast<char*>(compute_.data()) + size_t(c.lo - begin_) * esz;
      master_to_compute(dst, m, n);
      if (out) std::memcpy(out, dst, size_t(n) * esz);
    } else if (out) {
      master_to_compute(out, m, n);
    }
    return;
  }
  // On NVMe the kept parameters have a committed region of their own: only the device's
  // copy needs restoring, from the committed master.
  if (!out) return;
  Slot& s = slots_[next_slot_];
  next_slot_ = (next_slot_ + 1) % 3;
  read_state(s, cur_, c.lo, c.hi, false);
  queue().wait(s.read_ticket);
  master_to_compute(out, s.master, n);
  s.lo = -1;
}

void HostOptimizer::flush() {
  if (!file_) return;
  io::NvmeQueue& q = queue();
  q.wait(q.last_ticket());
  for (Slot& s : slots_) s.lo = -1;
}

void HostOptimizer::commit() {
  if (two_copies_) cur_ = 1 - cur_;
  for (Slot& s : slots_) s.lo = -1;
}

}  // namespace strata::zero
