// Page-aligned host memory: mmap'd, advised for transparent huge pages, and first-touched
// in parallel by the OpenMP threads that will use it (a first touch of fresh memory faults
// each page in and is far slower than reuse, so it happens once, at allocation, in parallel).
#pragma once
#include <cstddef>

namespace strata::host {

void* host_alloc(size_t bytes, const char* tag);  // throws strata::Error on failure
void host_free(void* p, size_t bytes);
// Page-locks [p, p+bytes) (mlock); an Error naming RLIMIT_MEMLOCK when the limit is too low.
void host_lock(void* p, size_t bytes, const char* tag);
void host_unlock(void* p, size_t bytes);

}  // namespace strata::host
