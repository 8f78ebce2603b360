#include "comm/topology.h"

#include <algorithm>

#include "core/error.h"

namespace strata {

Topology Topology::from_hosts(const std::vector<std::string>& hosts) {
  Topology t;
  std::vector<std::string> seen;
  for (const std::string& h : hosts) {
    auto it = std::find(seen.begin(), seen.end(), h);
    t.node_of_rank.push_back(int(it - seen.begin()));
    if (it == seen.end()) seen.push_back(h);
  }
  return t;
}

Topology Topology::blocks(int world, int ranks_per_node) {
  STRATA_CHECK(ranks_per_node > 0 && world % ranks_per_node == 0,
               std::to_string(world) + " ranks in nodes of " + std::to_string(ranks_per_node),
               "STRATA_RANKS_PER_NODE must divide the number of ranks");
  Topology t;
  for (int r = 0; r < world; ++r) t.node_of_rank.push_back(r / ranks_per_node);
  return t;
}

int Topology::nodes() const {
  return node_of_rank.empty() ? 0 : *std::max_element(node_of_rank.begin(), node_of_rank.end()) + 1;
}

int Topology::local_rank(int rank) const {
  return int(std::count(node_of_rank.begin(), node_of_rank.begin() + rank, node(rank)));
}

int Topology::local_size(int rank) const {
  return int(std::count(node_of_rank.begin(), node_of_rank.end(), node(rank)));
}

bool Topology::uniform() const {
  for (int r = 0; r < world(); ++r)
    if (local_size(r) != local_size(0)) return false;
  return true;
}

std::vector<int> Topology::ranks_on(int n) const {
  std::vector<int> out;
  for (int r = 0; r < world(); ++r)
    if (node(r) == n) out.push_back(r);
  return out;
}

}  // namespace strata
