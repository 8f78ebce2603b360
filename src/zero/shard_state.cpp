#include "zero/shard_state.h"

#include <algorithm>
#include <cstring>

#include "host/convert.h"

namespace strata::zero {

ShardState::ShardState(Backend& backend, const EnginePlan& plan, int rank, DeviceMaster& master, AdamW& adam,
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
        out.push_back({kind, p.flat_begin + a, std::min(max_count, p.count - a), p.shard_offset + a,
                       plan_.layout.params()[size_t(p.param)].weight_decay});
  return out;
}

void ShardState::io(int kind, int64_t lo, int64_t hi, float* buf, bool write) {
  // Stage 0 keeps the master in the model and m, v in AdamW, both by flat offset.
  const int64_t split = plan_.policy.optimizer_states ? std::clamp(plan_.host_begin, lo, hi) : hi;
  if (split > lo) device_io(kind, lo, split - lo, buf, write);
  if (hi > split) {
    // The host part: NVMe reads and writes whole aligned blocks, so widen to them.
    const int64_t al = host_->alignment(), base = host_->begin();
    const int64_t A = base + (split - base) / al * al,
                  B = std::min(host_->end(), base + (hi - base + al - 1) / al * al);
    std::vector<float> tmp(size_t(B - A));
    const HostState state = kind == 0 ? HostState::master : kind == 1 ? HostState::m : HostState::v;
    host_->read_committed(state, A, B, tmp.data());
    float* part = buf + (split - lo);
    if (!write) {
      std::memcpy(part, tmp.data() + (split - A), size_t(hi - split) * 4);
    } else {
      std::memcpy(tmp.data() + (split - A), part, size_t(hi - split) * 4);
      host_->write_state(state, A, B, tmp.data());
    }
  }
}

void ShardState::device_io(int kind, int64_t at, int64_t n, float* buf, bool write) {
  if (kind == 0) {
    if (write)
      master_.write(at, at + n, buf);
    else
      master_.read(at, at + n, buf);
    return;
  }
  if (adam_.moment_dtype() == DType::f32) {
    char* dev = static_cast<char*>(kind == 1 ? adam_.m() : adam_.v());
    if (write)
      be_.upload(dev + size_t(at) * 4, buf, size_t(n) * 4);
    else
      be_.download(buf, dev + size_t(at) * 4, size_t(n) * 4);
    return;
  }
  // bf16 moments: widened on the way out (exactly), rounded to nearest on the way in.
  char* dev = static_cast<char*>(kind == 1 ? adam_.m() : adam_.v()) + size_t(at) * 2;
  std::vector<uint16_t> half(static_cast<size_t>(n));
  if (write) {
    host::convert_from_f32(half.data(), DType::bf16, buf, size_t(n));
    be_.upload(dev, half.data(), size_t(n) * 2);
  } else {
    be_.download(half.data(), dev, size_t(n) * 2);
    host::convert_to_f32(buf, half.data(), DType::bf16, size_t(n));
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
        device_io(kind, ps.offset, ps.count, buf.data(), true);
      }
    }
  }
}

}  // namespace strata::zero
