// ZeroEngine, part 4 of 4: accounting (bytes by kind) and shard state I/O for checkpoints.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "zero/zero_engine.h"

namespace strata::zero {

size_t ZeroEngine::param_bytes() const {
  return policy_.parameters ? shard_compute_.bytes() + params_->persistent_bytes() : 0;
}

size_t ZeroEngine::grad_bytes() const { return policy_.gradients ? shard_grads_.bytes() : grads_full_.bytes(); }

size_t ZeroEngine::optimizer_state_bytes() const { return adam_->state_bytes() + shard_master_.bytes(); }

size_t ZeroEngine::host_bytes() const { return host_ ? host_->bytes() : 0; }

size_t ZeroEngine::comm_buffer_bytes() const {
  return bucket_mem_.bytes() + bucket_out_.bytes() + grad_scratch_mem_.bytes() +
         (params_ ? params_->buffer_bytes() : 0) + (policy_.gradients ? 0 : shard_grads_.bytes()) +
         (policy_.parameters ? 0 : shard_compute_.bytes());
}

std::vector<ZeroEngine::StatePiece> ZeroEngine::state_pieces(int64_t max_count) const {
  std::vector<StatePiece> out;
  std::vector<OwnedPiece> owned;
  if (policy_.optimizer_states) {
    owned = plan_.layout.owned_pieces(rank_);
  } else if (rank_ == 0) {  // every rank holds everything: one copy is enough
    for (size_t i = 0; i < buf_.params.size(); ++i)
      owned.push_back({int(i), buf_.params[i].offset, buf_.params[i].count, buf_.params[i].offset});
  }
  for (int kind = 0; kind < 3; ++kind)
    for (const OwnedPiece& p : owned)
      for (int64_t a = 0; a < p.count; a += max_count)
        out.push_back({kind, p.flat_begin + a, std::min(max_count, p.count - a), p.shard_offset + a});
  return out;
}

void ZeroEngine::shard_state_io(int kind, int64_t lo, int64_t hi, float* buf, bool write) {
  // Stage 0 keeps the master in the model and m, v in AdamW, both by flat offset.
  const int64_t split = policy_.optimizer_states ? std::clamp(plan_.host_begin, lo, hi) : hi;
  if (split > lo) {
    float* dev = kind == 0   ? (policy_.optimizer_states ? shard_master_.as<float>() : buf_.master)
                 : kind == 1 ? adam_->m()
                             : adam_->v();
    if (write)
      be_.upload(dev + lo, buf, size_t(split - lo) * 4);
    else
      be_.download(buf, dev + lo, size_t(split - lo) * 4);
  }
  if (hi > split) {
    // The host part: NVMe reads and writes whole aligned blocks, so widen to them.
    const int64_t al = host_->alignment(), base = host_->begin();
    const int64_t A = base + (split - base) / al * al,
                  B = std::min(host_->end(), base + (hi - base + al - 1) / al * al);
    std::vector<float> tmp(size_t(B - A));
    host_->read_committed(kind, A, B, tmp.data());
    float* part = buf + (split - lo);
    if (!write) {
      std::memcpy(part, tmp.data() + (split - A), size_t(hi - split) * 4);
    } else {
      std::memcpy(tmp.data() + (split - A), part, size_t(hi - split) * 4);
      host_->write_state(kind, A, B, tmp.data());
    }
  }
}

void ZeroEngine::read_state(const StatePiece& p, float* out) {
  drain();
  wait_host();
  shard_state_io(p.kind, p.shard_offset, p.shard_offset + p.count, out, false);
}

void ZeroEngine::load_moments(const FlatSource& m, const FlatSource& v) {
  drain();
  wait_host();
  std::vector<float> buf;
  for (const StatePiece& p : state_pieces(int64_t(1) << 22)) {
    if (p.kind == 0) continue;
    buf.resize(size_t(p.count));
    (p.kind == 1 ? m : v).read(p.flat_begin, p.count, buf.data());
    shard_state_io(p.kind, p.shard_offset, p.shard_offset + p.count, buf.data(), true);
  }
  if (!policy_.optimizer_states && rank_ != 0) {  // stage 0: the other ranks' full copies
    for (size_t i = 0; i < buf_.params.size(); ++i) {
      const ParamSpan& ps = buf_.params[i];
      buf.resize(size_t(ps.count));
      for (int kind = 1; kind < 3; ++kind) {
        (kind == 1 ? m : v).read(ps.offset, ps.count, buf.data());
        be_.upload((kind == 1 ? adam_->m() : adam_->v()) + ps.offset, buf.data(), size_t(ps.count) * 4);
      }
    }
  }
}

}  // namespace strata::zero
