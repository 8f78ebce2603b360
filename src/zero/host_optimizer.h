// The host side of an offloaded optimizer (S4, --offload-optimizer cpu): this rank's f32
// master, m and v for shard offsets [begin, end) live in host RAM, with the gradient
// accumulator (in the run's gradient dtype), and the CPU Adam updates them chunk by chunk on
// the host stream.
//
// Speculative steps (the default): the update of a chunk runs as soon as its gradients are
// complete, during backward, before the global norm is known. It reads the committed state
// (copy `cur`) and writes the other copy, so the committed state stays intact: commit()
// flips the copies; when clipping or an overflow says the speculation was wrong, the
// trainer's real step recomputes from the committed copy (clipping) or keeps it (overflow).
// This costs a second copy of master, m and v in host RAM, and no extra memory traffic (the
// kernel reads one copy and writes the other in the same pass). Without speculation there
// is one copy, updated in place after the norm is known.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "tier/tier_manager.h"
#include "zero/adamw.h"

namespace strata::zero {

struct HostChunk {
  int bucket;      // the reduce bucket it belongs to
  int64_t lo, hi;  // shard offsets
};

class HostOptimizer {
 public:
  // groups: AdamW groups in shard offsets (the owned pieces, with weight decay), of which
  // the parts in [begin, end) are this optimizer's.
  HostOptimizer(tier::TierManager& tm, int64_t begin, int64_t end, std::span<const AdamW::Group> groups,
                AdamWConfig config, bool speculative, DType compute_dtype, bool keep_compute);

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  bool speculative() const { return speculative_; }
  size_t bytes() const;  // host memory held (states, copies, accumulator)

  // The committed master, writable, for initialisation (shard offsets - begin); then
  // finish_init() derives the host compute copy from it.
  float* master_mut() { return master_[cur_].as<float>(); }
  void finish_init();
  // grads[lo, hi) (+)= g (rounded to the gradient dtype, as on the device); returns Σ g²
  // of the accumulated chunk (the norm's host part).
  double accumulate(const HostChunk& c, const float* g, bool first);
  // AdamW on the chunk with the accumulated gradients: speculative → writes the other copy,
  // else in place. The updated parameters are written to `out` (compute dtype, chunk-relative)
  // when given, and to the host compute copy when kept. Returns true on a non-finite gradient.
  bool update(const HostChunk& c, float lr, float grad_scale, int64_t t, void* out);
  // The speculative copy becomes the committed one.
  void commit();
  // Writes the committed parameters of the chunk in the compute dtype to out (and the host
  // compute copy): undoes a speculative copy-out after an overflow.
  void restore(const HostChunk& c, void* out);

  const float* master() const { return master_[cur_].as<float>(); }  // committed, shard offsets - begin
  const void* compute() const { return compute_.data(); }            // host compute copy (param offload)

 private:
  AdamWConfig cfg_;
  int64_t begin_, end_;
  bool speculative_;
  DType compute_dtype_;
  std::vector<AdamW::Group> groups_;  // clipped to [begin, end), offsets relative to begin
  Buffer master_[2], m_[2], v_[2], grads_, compute_;
  int cur_ = 0;
};

}  // namespace strata::zero
