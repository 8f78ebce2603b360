#include "zero/partition.h"

#include <algorithm>

#include "core/error.h"

namespace strata::zero {

PartitionLayout::PartitionLayout(std::vector<ParamSpan> params, int world, int64_t sub_group_size, int64_t align)
    : params_(std::move(params)), world_(world), align_(align) {
  STRATA_CHECK(world >= 1, "partition over " + std::to_string(world) + " ranks", "the world size must be positive");
  STRATA_CHECK(sub_group_size >= 1, "sub-group size " + std::to_string(sub_group_size),
               "--sub-group-size must be positive");
  STRATA_CHECK(align >= 1, "alignment " + std::to_string(align), "must be positive");
  int64_t expect = 0;
  for (const ParamSpan& p : params_) {
    STRATA_CHECK(p.offset == expect && p.count >= 0,
                 "parameter '" + p.name + "' at " + std::to_string(p.offset) + " does not follow the previous one",
                 "parameters must tile the flat space in order");
    expect += p.count;
  }
  model_elements_ = expect;
  const int64_t quantum = int64_t(world) * align;
  auto close = [&](int unit, bool persistent, int64_t begin, int64_t count) {
    if (count == 0) return;
    SubGroup g{unit, persistent, begin, count, (count + quantum - 1) / quantum * quantum, 0, padded_total_};
    g.shard = g.padded / world;
    shard_offsets_.push_back(padded_total_ / world);
    padded_total_ += g.padded;
    groups_.push_back(g);
  };
  int open_unit = params_.empty() ? 0 : params_.front().unit;
  bool open_persistent = params_.empty() ? false : params_.front().persistent;
  int64_t open_begin = 0, open_count = 0;
  for (const ParamSpan& p : params_) {
    if (p.unit != open_unit || p.persistent != open_persistent ||
        (open_count > 0 && open_count + p.count > sub_group_size)) {
      close(open_unit, open_persistent, open_begin, open_count);
      open_unit = p.unit, open_persistent = p.persistent, open_begin = p.offset, open_count = 0;
    }
    int64_t rest = p.count, at = p.offset;
    while (open_count + rest > sub_group_size) {  // a parameter too big for one sub-group
      const int64_t take = sub_group_size - open_count;
      open_count += take, at += take, rest -= take;
      close(open_unit, open_persistent, open_begin, open_count);
      open_begin = at, open_count = 0;
    }
    open_count += rest;
  }
  close(open_unit, open_persistent, open_begin, open_count);
}

int64_t PartitionLayout::slice_begin(int g, int rank) const {
  const SubGroup& s = groups_[size_t(g)];
  return s.storage_offset + int64_t(rank) * s.shard;
}

std::vector<OwnedPiece> PartitionLayout::owned_pieces(int rank) const {
  std::vector<OwnedPiece> out;
  size_t p = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const SubGroup& s = groups_[g];
    // This rank's slice covers model-flat [lo, hi) of the sub-group (clipped: padding is at the end).
    const int64_t lo = s.flat_begin + std::min(s.count, int64_t(rank) * s.shard);
    const int64_t hi = s.flat_begin + std::min(s.count, int64_t(rank + 1) * s.shard);
    while (p < params_.size() && params_[p].offset + params_[p].count <= lo) ++p;
    for (size_t q = p; q < params_.size() && params_[q].offset < hi; ++q) {
      const int64_t b = std::max(lo, params_[q].offset), e = std::min(hi, params_[q].offset + params_[q].count);
      if (e > b) out.push_back({int(q), b, e - b, shard_offsets_[g] + (b - lo)});
    }
  }
  return out;
}

double model_state_bytes(int stage, double psi, int world, double K, double param_bytes, double grad_bytes) {
  const double n = world;
  switch (stage) {
    case 0:
      return (param_bytes + grad_bytes + K) * psi;
    case 1:
      return (param_bytes + grad_bytes) * psi + K * psi / n;
    case 2:
      return param_bytes * psi + (grad_bytes + K) * psi / n;
    case 3:
      return (param_bytes + grad_bytes + K) * psi / n;
  }
  throw_error("ZeRO stage " + std::to_string(stage), "stages are 0, 1, 2 and 3");
}

int64_t first_sample(int64_t step, int rank, int world, int micro, int accum, int micro_index) {
  const int64_t per_rank = int64_t(micro) * accum;
  return step * per_rank * world + int64_t(rank) * per_rank + int64_t(micro_index) * micro;
}

}  // namespace strata::zero
