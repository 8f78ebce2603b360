// Which node (host) each rank runs on. Ranks on one node share its RAM, NVMe and CPUs and
// talk over its memory; ranks on different nodes talk over the network, which is the
// scarce link (hierarchical partitioning and the intra/inter-node byte counters use it).
#pragma once
#include <string>
#include <vector>

namespace strata {

struct Topology {
  std::vector<int> node_of_rank;  // node index (0.., in order of first appearance) per rank

  // One node per distinct host name.
  static Topology from_hosts(const std::vector<std::string>& hosts);
  // Consecutive blocks of `ranks_per_node` ranks (STRATA_RANKS_PER_NODE: tests, or
  // containers whose host names all look alike).
  static Topology blocks(int world, int ranks_per_node);

  int world() const { return int(node_of_rank.size()); }
  int nodes() const;
  int node(int rank) const { return node_of_rank[size_t(rank)]; }
  int local_rank(int rank) const;  // index among the ranks of its node, in rank order
  int local_size(int rank) const;  // ranks on its node
  // Every node holds the same number of ranks (what hierarchical partitioning needs).
  bool uniform() const;
  // The ranks with node(rank) == n, ascending.
  std::vector<int> ranks_on(int n) const;
};

}  // namespace strata
