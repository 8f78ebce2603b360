// The ZeRO partition layout: the model's flat parameter space cut into sub-groups, each
// padded so every rank owns one contiguous, aligned 1/N slice of it.
//
// Sub-groups are built by walking the parameters in flat order, packing whole parameters
// up to `sub_group_size` elements without crossing a unit boundary (a unit is what stage 3
// gathers at once: the embeddings, one transformer layer, the final norm) or mixing
// persistent and partitioned-at-stage-3 parameters; a parameter
// larger than `sub_group_size` is cut into several sub-groups. Each sub-group of n elements
// is padded to P = ceil(n / (N·align))·N·align, so rank r owns [r·P/N, (r+1)·P/N) of it.
// The ZeRO engine stores sub-groups back to back in that padded space.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::zero {

struct ParamSpan {
  std::string name;
  int unit;        // gather unit this parameter belongs to
  int64_t offset;  // first element in the model's flat (unpadded) space
  int64_t count;
  bool persistent = false;   // stage 3 keeps it whole on every rank (below the persistence threshold)
  bool weight_decay = true;  // AdamW decays it (matmul weights, embeddings; not norms and biases)
};

struct SubGroup {
  int unit;
  bool persistent;     // holds only persistent parameters (sub-groups never mix the two)
  int64_t flat_begin;  // model-flat elements [flat_begin, flat_begin + count)
  int64_t count;
  int64_t padded;          // count rounded up to a multiple of world·align
  int64_t shard;           // padded / world: each rank's slice
  int64_t storage_offset;  // where this sub-group starts in the padded space
};

// A piece of one parameter that one rank owns: model-flat [flat_begin, +count) lives at
// [shard_offset, +count) of that rank's concatenated shards.
struct OwnedPiece {
  int param;
  int64_t flat_begin, count, shard_offset;
};

class PartitionLayout {
 public:
  PartitionLayout() = default;  // empty: no parameters
  PartitionLayout(std::vector<ParamSpan> params, int world, int64_t sub_group_size, int64_t align = 16);

  int world() const { return world_; }
  int64_t align() const { return align_; }
  const std::vector<SubGroup>& sub_groups() const { return groups_; }
  const std::vector<ParamSpan>& params() const { return params_; }
  int64_t model_elements() const { return model_elements_; }
  int64_t padded_elements() const { return padded_total_; }          // Σ padded
  int64_t shard_elements() const { return padded_total_ / world_; }  // per rank
  int64_t padding_elements() const { return padded_total_ - model_elements_; }

  // Rank r's slice of sub-group g in the padded space.
  int64_t slice_begin(int g, int rank) const;
  // Offset of sub-group g's slice within a rank's concatenated shards.
  int64_t shard_offset(int g) const { return shard_offsets_[size_t(g)]; }
  // The (parts of) parameters rank r owns, in order; padding owns nothing.
  std::vector<OwnedPiece> owned_pieces(int rank) const;

 private:
  std::vector<ParamSpan> params_;
  std::vector<SubGroup> groups_;
  std::vector<int64_t> shard_offsets_;
  int world_ = 1;
  int64_t align_ = 16;
  int64_t model_elements_ = 0, padded_total_ = 0;
};

// Per-rank bytes of model states by the ZeRO paper's formulas (Ψ parameters, N ranks,
// K bytes of optimizer state per parameter, `param_bytes`/`grad_bytes` for the compute
// copies: 2 in mixed precision). Stage 0: (p+g+K)Ψ; 1: (p+g)Ψ + KΨ/N; 2: pΨ + (g+K)Ψ/N;
// 3: (p+g+K)Ψ/N. With p = g = 2, K = 12: 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N.
double model_state_bytes(int stage, double psi, int world, double K = 12, double param_bytes = 2,
                         double grad_bytes = 2);

// Sample indices a rank trains on: the global batch of a step is micro·accum·world
// consecutive samples, identical whatever the world size; rank r takes the r-th
// contiguous block of micro·accum, in micro-batches of `micro`.
int64_t first_sample(int64_t step, int rank, int world, int micro, int accum, int micro_index);

}  // namespace strata::zero
