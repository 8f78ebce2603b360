#include "zero/host_optimizer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "host/convert.h"
#include "zero/bucket_plan.h"
#include "zero/nvme_state_store.h"
#include "zero/ram_state_store.h"

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

HostOptimizer::HostOptimizer(tier::TierManager& tm, const HostOptimizerPlan& plan)
    : cfg_(plan.config),
      fmt_(plan.format),
      begin_(plan.begin),
      end_(plan.end),
      speculative_(plan.speculative),
      compute_dtype_(plan.compute_dtype) {
  STRATA_CHECK(fmt_.master == DType::f32 || fmt_.master == compute_dtype_,
               "HostOptimizer: a " + std::string(dtype_name(fmt_.master)) + " master with " +
                   std::string(dtype_name(compute_dtype_)) + " compute",
               "this is a bug in the caller: plan_engine refuses it");
  for (const AdamW::Group& g : plan.groups) {
    const int64_t lo = std::max(g.offset, begin_), hi = std::min(g.offset + g.count, end_);
    if (hi > lo) groups_.push_back({lo - begin_, hi - lo, g.decay, g.index + (lo - g.offset)});
  }
  int64_t kept32 = 0;
  for (const AdamW::Group& g : groups_) {
    const bool own = fmt_.master != DType::f32 && fmt_.master_of(g.decay) == DType::f32;
    f32_at_.push_back(own ? kept32 : -1);
    kept32 += own ? g.count : 0;
  }
  STRATA_CHECK(kept32 <= std::max<int64_t>(plan.f32_master_room, 0),
               "HostOptimizer: " + std::to_string(kept32) + " f32 masters beside the bf16 one, room for " +
                   std::to_string(plan.f32_master_room),
               "this is a bug in the engine plan: it counts them per rank");
  // Two copies of the states when speculating, and always on NVMe: a step's writes go to the
  // copy that is not committed, so a failed write leaves the last completed step's state intact.
  const bool nvme = plan.nvme != nullptr;
  two_copies_ = speculative_ || nvme;
  std::unique_ptr<io::NvmeFile> file;
  uint64_t block = 0;
  if (nvme) {
    // The swap file is sized once its block size is known: made small first, then re-made.
    const std::string name = "strata-rank" + std::to_string(plan.rank) + ".swap";
    block = io::NvmeFile(*plan.nvme, name, 1).block_size();
    STRATA_CHECK(plan.chunk_elements > 0 && size_t(plan.chunk_elements) * 2 % block == 0,
                 "NVMe swap chunks of " + std::to_string(plan.chunk_elements) + " elements",
                 "this is a bug in the engine: chunks must be block-aligned");
    sizes_ = host_optimizer_sizes(end_ - begin_, compute_dtype_, plan.keep_compute, speculative_, true,
                                  plan.chunk_elements, block, fmt_, plan.f32_master_room);
    file = std::make_unique<io::NvmeFile>(*plan.nvme, name, sizes_.nvme_bytes);
  } else {
    sizes_ = host_optimizer_sizes(end_ - begin_, compute_dtype_, plan.keep_compute, speculative_, false,
                                  plan.chunk_elements, 0, fmt_, plan.f32_master_room);
  }
  // Gradients in the run's gradient dtype (the compute dtype), accumulated with the same
  // rounding as on the device, so offloaded and device runs agree (and f16 overflow shows).
  grads_ = tm.allocate(Tier::host, sizes_.grads, "host:grads");
  grads_.zero();
  if (sizes_.f32_master_elements > 0)
    for (int c = 0; c < sizes_.copies; ++c) {
      f32_master_[c] =
          tm.allocate(Tier::host, size_t(sizes_.f32_master_elements) * 4,
                      sizes_.copies > 1 ? (c ? "host:master_f32:b" : "host:master_f32:a") : "host:master_f32");
      f32_master_[c].zero();
    }
  const StoreShape shape{begin_, end_, compute_dtype_, fmt_, sizes_.copies, sizes_.keep};
  if (nvme)
    store_ = std::make_unique<NvmeStateStore>(tm, shape, std::move(file), plan.chunk_elements, sizes_);
  else
    store_ = std::make_unique<RamStateStore>(tm, shape, cfg_.kernel);
  if (!nvme)  // the RAM store sizes its buffers from the shape; the NVMe store takes the plan's
    STRATA_CHECK(store_->bytes() == sizes_.states + sizes_.compute,
                 "HostOptimizer: the RAM state store holds " + std::to_string(store_->bytes()) + " bytes, planned " +
                     std::to_string(sizes_.states + sizes_.compute),
                 "this is a bug: host_optimizer_sizes and RamStateStore disagree");
}

HostOptimizer::~HostOptimizer() = default;

size_t HostOptimizer::bytes() const {
  return grads_.bytes() + f32_master_[0].bytes() + f32_master_[1].bytes() + store_->bytes();
}

// ---- the committed states, by range (start-up, checkpoints, export, fetches)

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

void HostOptimizer::write_state(HostState s, int64_t lo, int64_t hi, const float* src) {
  STRATA_CHECK(s != HostState::params, "HostOptimizer::write_state of the kept parameters",
               "this is a bug in the caller: they follow the master (finish_init)");
  // The f32 masters beside a bf16 one take the values as they are; the bf16 master their
  // rounding to nearest, as it holds after every update.
  if (s == HostState::master) store_f32_masters(lo, hi, src);
  store_->write(s, cur_, lo, hi, src);
}

void HostOptimizer::read_committed(HostState s, int64_t lo, int64_t hi, float* dst) {
  store_->read(s, cur_, lo, hi, dst);
  if (s == HostState::master) load_f32_masters(lo, hi, dst);
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
  const size_t esz = dtype_size(compute_dtype_), msz = dtype_size(fmt_.master), ssz = dtype_size(fmt_.moments);
  const bool master16 = fmt_.master != DType::f32, moments16 = fmt_.moments != DType::f32;
  const auto at = [](void* p, int64_t i, size_t sz) -> void* { return static_cast<char*>(p) + size_t(i) * sz; };
  bool nonfinite = false;
  for (size_t k = 0; k < groups_.size(); ++k) {
    const AdamW::Group& g = groups_[k];
    const int64_t a = std::max(g.offset + begin_, lo), b = std::min(g.offset + begin_ + g.count, hi);
    if (b <= a) continue;
    const int64_t i = a - lo;
    host::AdamTensors ts;
    if (f32_at_[k] >= 0) {  // an f32 master beside the bf16 one, which gets its rounding to nearest
      const int64_t j = f32_at_[k] + (a - g.offset - begin_);
      ts.param = st.f32_master + j, ts.param_in = in.f32_master + j;
      ts.out_dtype = fmt_.master, ts.param_out = at(st.p.master, i, msz);
    } else if (master16) {
      ts.param16 = static_cast<uint16_t*>(at(st.p.master, i, msz));
      ts.param16_in = static_cast<const uint16_t*>(at(in.p.master, i, msz));
    } else {
      ts.param = static_cast<float*>(at(st.p.master, i, msz)),
      ts.param_in = static_cast<float*>(at(in.p.master, i, msz));
    }
    if (moments16) {
      ts.m16 = static_cast<uint16_t*>(at(st.p.m, i, ssz)), ts.v16 = static_cast<uint16_t*>(at(st.p.v, i, ssz));
      ts.m16_in = static_cast<uint16_t*>(at(in.p.m, i, ssz)), ts.v16_in = static_cast<uint16_t*>(at(in.p.v, i, ssz));
    } else {
      ts.m = static_cast<float*>(at(st.p.m, i, ssz)), ts.v = static_cast<float*>(at(st.p.v, i, ssz));
      ts.m_in = static_cast<float*>(at(in.p.m, i, ssz)), ts.v_in = static_cast<float*>(at(in.p.v, i, ssz));
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
    const host::AdamHyper h{lr,   cfg_.beta1,           cfg_.beta2, cfg_.eps,  g.decay ? cfg_.weight_decay : 0.0f,
                            true, cfg_.bias_correction, t,          grad_scale};
    nonfinite |= host::adam_step(ts, h, cfg_.kernel);
  }
  // Padding is in no group; where the master is in the compute dtype (f32 runs, a bf16
  // master) the copy-out is the master itself.
  if (out && compute_dtype_ == fmt_.master) std::memcpy(out, st.p.master, size_t(hi - lo) * esz);
  return nonfinite;
}

bool HostOptimizer::update(const HostChunk& c, const HostChunk* next, float lr, float grad_scale, int64_t t,
                           void* out) {
  const int src = cur_, dst = two_copies_ ? 1 - cur_ : cur_;
  const ChunkStates cs = store_->begin_update(c, next, src, dst);
  // The copy-out goes to the kept parameters where there are any (then to out), else to out.
  void* copy_out = cs.params ? cs.params : out;
  const bool bad =
      adam(States{cs.out, f32_masters(dst)}, States{cs.in, f32_masters(src)}, c.lo, c.hi, lr, grad_scale, t, copy_out);
  if (out && cs.params) std::memcpy(out, cs.params, size_t(c.hi - c.lo) * dtype_size(compute_dtype_));
  store_->end_update(c, dst);
  return bad;
}

void HostOptimizer::commit() {
  if (two_copies_) cur_ = 1 - cur_;
  store_->drop_prefetches();
}

}  // namespace strata::zero
