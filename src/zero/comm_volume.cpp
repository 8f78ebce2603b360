#include "zero/comm_volume.h"

#include <algorithm>

namespace strata::zero {

Stage3Traffic stage3_traffic(const PartitionLayout& lay, size_t param_bytes, int ranks_per_node, int hpz,
                             int micro_batches) {
  const double N = lay.world(), L = std::min(ranks_per_node, lay.world()), K = std::max(hpz, 1);
  const double A = micro_batches, b = double(param_bytes);
  double part = 0, persist = 0;  // Ψ'_p, Ψ'_s
  for (const SubGroup& g : lay.sub_groups()) (g.persistent ? persist : part) += double(g.padded);
  Stage3Traffic t;
  if (N <= 1) return t;
  const double remote = (N - L) / (N - 1);  // share of a world collective bound for other nodes
  auto world = [&](double sent, double& intra, double& inter) {
    inter += sent * remote;
    intra += sent * (1 - remote);
  };
  const double gather = (N - 1) / N * part * b;  // one world all-gather of the partitioned parameters
  if (K <= 1) {
    world(2 * A * gather, t.gather_intra, t.gather_inter);
  } else {
    world(gather, t.gather_intra, t.gather_inter);
    // A group of K consecutive ranks lies in min(K, L) ranks of each node it spans.
    const double in_node = std::min(K, L), group_remote = K > 1 ? (K - in_node) / (K - 1) : 0;
    const double group = (2 * A - 1) * (K - 1) / K * part * b;
    t.gather_inter += group * group_remote;
    t.gather_intra += group * (1 - group_remote);
    t.secondary_bytes = part / K * b;
  }
  world((N - 1) / N * persist * b, t.gather_intra, t.gather_inter);
  world(A * (N - 1) / N * double(lay.padded_elements()) * 4, t.reduce_intra, t.reduce_inter);
  return t;
}

}  // namespace strata::zero
