#include "host/host_memory.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace strata::host {

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

void* host_alloc(size_t bytes, const char* tag) {
  if (bytes == 0) return nullptr;
  const size_t len = round_up(bytes, 4096);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  STRATA_CHECK(
      p != MAP_FAILED,
      std::string("mmap of ") + format_bytes(double(len)) + " for '" + tag + "' failed: " + std::strerror(errno),
      "the machine is out of memory: lower --device-mem or the model/batch size");
  if (len >= (2u << 20)) madvise(p, len, MADV_HUGEPAGE);  // advisory: failure is harmless
  // Parallel first touch, static schedule like the ops, one write per 4 KiB page.
  const int64_t pages = int64_t(len / 4096);
  auto* c = static_cast<volatile char*>(p);
#pragma omp parallel for schedule(static) if (pages > 512)
  for (int64_t i = 0; i < pages; ++i) c[size_t(i) * 4096] = 0;
  return p;
}

void host_lock(void* p, size_t bytes, const char* tag) {
  if (mlock(p, round_up(bytes, 4096)) == 0) return;
  const int err = errno;
  struct rlimit lim {};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  const std::string limit = lim.rlim_cur == RLIM_INFINITY ? "unlimited" : format_bytes(double(lim.rlim_cur));
  throw_error(std::string("page-locking ") + format_bytes(double(bytes)) + " for '" + tag +
                  "' failed: " + std::strerror(err) + " (ulimit -l allows " + limit + ")",
              "raise the locked-memory limit (ulimit -l unlimited, or memlock in /etc/security/limits.conf), or "
              "lower --pin-buffer-count / --pin-buffer-size");
}

void host_unlock(void* p, size_t bytes) { munlock(p, round_up(bytes, 4096)); }

void host_free(void* p, size_t bytes) {
  if (p) munmap(p, round_up(bytes, 4096));
}

}  // namespace strata::host
