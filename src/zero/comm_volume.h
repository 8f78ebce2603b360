// Stage 3's communication per step and rank, split into within and across nodes the way
// the communicator counts it (a collective's volume spread over this rank's peers by where
// they are), for `strata plan` and to check what the engine sends.
//
// N ranks, L per node, Ψ'_p the partitioned parameters (padded), Ψ'_s the persistent ones,
// b the compute dtype's bytes, A micro-batches per step; a world all-gather of V elements
// sends V·(N-1)/N, of which (N-L)/(N-1) crosses nodes:
//   without hpZ: 2A all-gathers of Ψ'_p across all ranks (forward, backward);
//   hpZ in groups of K: the step's first forward gather across all ranks, the other 2A-1
//   within the group: (K-1)/K·Ψ'_p each, none of it across nodes when the group is in one
//   node (K divides L) — the cross-node gather volume falls by (2A-1)/2A;
//   both: Ψ'_s gathered once per step and A reduce-scatters of Ψ' in f32.
// (A tied embedding, as GPT-2's, is gathered in backward too; Llama's untied one is not, so
// for Llama this counts its embedding's backward gathers that do not happen.)
#pragma once
#include <cstddef>

#include "zero/partition.h"

namespace strata::zero {

struct Stage3Traffic {
  double gather_intra = 0, gather_inter = 0;  // parameter all-gathers, bytes
  double reduce_intra = 0, reduce_inter = 0;  // gradient reduce-scatters (f32), bytes
  double secondary_bytes = 0;                 // the hpZ partition this rank keeps
  double intra() const { return gather_intra + reduce_intra; }
  double inter() const { return gather_inter + reduce_inter; }
};

// ranks_per_node must divide the layout's world; hpz_partition_size 1 means none.
Stage3Traffic stage3_traffic(const PartitionLayout& layout, size_t param_bytes, int ranks_per_node,
                             int hpz_partition_size, int micro_batches);

}  // namespace strata::zero
