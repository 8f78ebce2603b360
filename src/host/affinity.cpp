#include "host/affinity.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace strata::host {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

void bind_this_thread(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  STRATA_CHECK(rc == 0, "binding a thread to CPUs " + cpu_list(cpus) + " failed: " + std::strerror(rc),
               "check the process's CPU affinity (taskset, cgroups), or lower --device-threads / --host-threads");
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(cpus[i]);
    if (j > i) {
      s += '-';
      s += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return s;
}

CpuSplit split_cpus(int device_threads, int host_threads, int local_rank, int local_size) {
  CpuSplit out;
  const std::vector<int> all = allowed_cpus();
  local_size = std::max(local_size, 1);
  const size_t per_rank = all.size() / size_t(local_size);
  if (device_threads + host_threads > int(per_rank) || per_rank == 0) {
    out.note = "not bound: " + std::to_string(device_threads) + " device + " + std::to_string(host_threads) +
               " host threads exceed this rank's " + std::to_string(per_rank) + " of " + std::to_string(all.size()) +
               " CPUs";
    return out;
  }
  const size_t base = per_rank * size_t(local_rank);
  out.device.assign(all.begin() + std::ptrdiff_t(base), all.begin() + std::ptrdiff_t(base) + device_threads);
  out.host.assign(all.begin() + std::ptrdiff_t(base) + device_threads,
                  all.begin() + std::ptrdiff_t(base) + device_threads + host_threads);
  out.note = "device CPUs " + cpu_list(out.device) + ", host CPUs " + cpu_list(out.host);
  return out;
}

}  // namespace strata::host
