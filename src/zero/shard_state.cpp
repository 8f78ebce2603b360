#include "zero/shard_state.h"

#include <algorithm>
#include <cstring>

namespace strata::zero {

ShardState::ShardState(Backend& backend, const EnginePlan& plan, int rank, float* master, AdamW& adam,
                       HostOptimizer* host)
    : be_(backend), plan_(plan), rank_(rank), master_(master), adam_(adam), host_(host) {}

std::vector<StatePiece> ShardState::pieces(int64_t max_count) const {
  std::vector<StatePiece> out;
  std::vector<OwnedPiece> owned;
  if (plan_.policy.optimizer_states) {
    owned = plan_.layout.owned_pieces(rank_);
  } else if (rank_ == 0) {  // every rank holds everything: one copy is enough
    const std::vector<ParamSpan>& params = plan_.layout.params();
    for (size_t i = 0; i < params.size(); ++i)
      owned.push_back({int(i), params[i].offset, params[i].count, params[i].offset});
  }
  for (int kind = 0; kind < 3; ++kind)
    for (const OwnedPiece& p : owned)
      for (int64_t a = 0; a < p.count; a += max_count)
        out.push_back({kind, p.flat_begin + a, std::min(max_count, p.count - a), p.shard_offset + a});
  return out;
}

void ShardState::io(int kind, int64_t lo, int64_t hi, float* buf, bool write) {
  // Stage 0 keeps the master in the model and m, v in AdamW, both by flat offset.
  const int64_t split = plan_.policy.optimizer_states ? std::clamp(plan_.host_begin, lo, hi) : hi;
  if (split > lo) {
    float* dev = kind == 0 ? master_ : kind == 1 ? adam_.m() : adam_.v();
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

void ShardState::read(const StatePiece& p, float* out) {
  io(p.kind, p.shard_offset, p.shard_offset + p.count, out, false);
}

void ShardState::load_moments(const FlatSource& m, const FlatSource& v) {
  std::vector<float> buf;
  for (const StatePiece& p : pieces(int64_t(1) << 22)) {
    if (p.kind == 0) continue;
    buf.resize(size_t(p.count));
    (p.kind == 1 ? m : v).read(p.flat_begin, p.count, buf.data());
    io(p.kind, p.shard_offset, p.shard_offset + p.count, buf.data(), true);
  }
  if (!plan_.policy.optimizer_states && rank_ != 0) {  // stage 0: the other ranks' full copies
    for (const ParamSpan& ps : plan_.layout.params()) {
      buf.resize(size_t(ps.count));
      for (int kind = 1; kind < 3; ++kind) {
        (kind == 1 ? m : v).read(ps.offset, ps.count, buf.data());
        be_.upload((kind == 1 ? adam_.m() : adam_.v()) + ps.offset, buf.data(), size_t(ps.count) * 4);
      }
    }
  }
}

}  // namespace strata::zero
