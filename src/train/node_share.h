// What one rank may use of its node. Ranks on one host share its CPUs, host RAM (the host
// tier, pinned staging pool included) and NVMe drive; each takes its share so that the
// node's ranks together never ask for more than the node has.
#pragma once
#include <cstddef>
#include <string>

namespace strata {

class Communicator;

struct NodeShare {
  int node = 0, nodes = 1;
  int local_rank = 0, local_size = 1;
  int cpus = 1;           // this rank's share of the CPUs it may run on
  size_t host_mem = 0;    // this rank's host-tier budget
  std::string nvme_path;  // --nvme-path with {rank}, {local_rank}, {node} and {host} filled in
};

// host_mem_request: --host-mem (0: the node's RAM less a tenth, divided among its ranks; a
// value is per rank, and the node's ranks together must fit its RAM). node_ram and
// node_cpus: what the node has (0: read from this machine).
NodeShare node_share(const Communicator* comm, size_t host_mem_request, const std::string& nvme_path,
                     size_t node_ram = 0, int node_cpus = 0);

// The path with {rank}, {local_rank}, {node} and {host} replaced.
std::string expand_rank_path(const std::string& path, int rank, int local_rank, int node, const std::string& host);

}  // namespace strata
