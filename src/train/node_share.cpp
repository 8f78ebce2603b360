#include "train/node_share.h"

#include <unistd.h>

#include <algorithm>

#include "comm/communicator.h"
#include "core/error.h"
#include "core/host_name.h"
#include "host/affinity.h"

namespace strata {

namespace {

std::string gib(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2f GiB", double(b) / double(size_t(1) << 30));
  return s;
}

size_t physical_ram() { return size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE)); }

}  // namespace

std::string expand_rank_path(const std::string& path, int rank, int local_rank, int node, const std::string& host) {
  std::string out = path;
  const std::pair<std::string, std::string> keys[] = {{"{rank}", std::to_string(rank)},
                                                      {"{local_rank}", std::to_string(local_rank)},
                                                      {"{node}", std::to_string(node)},
                                                      {"{host}", host}};
  for (const auto& [key, value] : keys)
    for (size_t at; (at = out.find(key)) != std::string::npos;) out.replace(at, key.size(), value);
  return out;
}

NodeShare node_share(const Communicator* comm, size_t host_mem_request, const std::string& nvme_path, size_t node_ram,
                     int node_cpus) {
  NodeShare s;
  std::string host = "localhost";
  if (comm) {
    s.node = comm->node(), s.nodes = comm->nodes();
    s.local_rank = comm->local_rank(), s.local_size = comm->local_size();
    host = comm->host();
  } else {
    host = host_name();
  }
  if (node_ram == 0) node_ram = physical_ram();
  if (node_cpus <= 0) node_cpus = int(host::allowed_cpus().size());
  s.cpus = std::max(1, node_cpus / s.local_size);
  if (host_mem_request == 0) {
    s.host_mem = node_ram / 10 * 9 / size_t(s.local_size);
  } else {
    const size_t total = host_mem_request * size_t(s.local_size);
    STRATA_CHECK(total <= node_ram,
                 "--host-mem " + gib(host_mem_request) + " for each of the " + std::to_string(s.local_size) +
                     " ranks on host " + host + " is " + gib(total) + ", more than its " + gib(node_ram) + " of RAM",
                 "lower --host-mem to at most " + gib(node_ram / size_t(s.local_size)) +
                     " per rank, or leave it out to divide the node's RAM among its ranks");
    s.host_mem = host_mem_request;
  }
  s.nvme_path = expand_rank_path(nvme_path, comm ? comm->rank() : 0, s.local_rank, s.node, host);
  return s;
}

}  // namespace strata
