// CPU sets for the CPU backend's two sides: the "device" (the compute thread's OpenMP team
// and the communication stream) and the "host" (CPU Adam, staging copies), on disjoint
// cores so that offload overlaps physically, like a GPU beside its CPU.
#pragma once
#include <string>
#include <vector>

namespace strata::host {

// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus();
// Restricts the calling thread (and threads it creates later) to `cpus`; no-op if empty.
void bind_this_thread(const std::vector<int>& cpus);
std::string cpu_list(const std::vector<int>& cpus);  // "0-3,8"

struct CpuSplit {
  std::vector<int> device, host;  // empty: not bound
  std::string note;               // how the split was made, for the start line
};
// This rank's share of the allowed CPUs (local_rank of local_size ranks on the node), cut
// into `device_threads` then `host_threads` CPUs. When they do not fit, nothing is bound
// and the note says so.
CpuSplit split_cpus(int device_threads, int host_threads, int local_rank, int local_size);

}  // namespace strata::host
