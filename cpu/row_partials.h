// The norms' backward passes sum a weight gradient over all rows. Each thread sums its rows
// into a partial row of its own, and the partials are added in thread order afterwards, so
// the result is the same on every run with the same thread count (no atomics, no races).
#pragma once
#include <cstdint>
#include <cstring>

#include "cpu/workspace.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace strata::cpu {

// body(n, partial) for the rows [0, N) split over the threads, `partial` the thread's zeroed
// row of `width` floats (workspace slot Scratch::layernorm); then add(partial) for each
// thread's row in thread order.
template <typename Body, typename Add>
void rows_with_partials(int64_t N, int64_t width, Workspace& ws, Body body, Add add) {
  int max_threads = 1;
#ifdef _OPENMP
  max_threads = omp_get_max_threads();
#endif
  float* partial = ws.get<float>(Scratch::layernorm, size_t(max_threads) * size_t(width));
  int used_threads = 1;
#pragma omp parallel
  {
    int nt = 1, id = 0;
#ifdef _OPENMP
    nt = omp_get_num_threads(), id = omp_get_thread_num();
#endif
#pragma omp single
    used_threads = nt;
    float* mine = partial + size_t(id) * size_t(width);
    std::memset(mine, 0, sizeof(float) * size_t(width));
    for (int64_t n = N * id / nt; n < N * (id + 1) / nt; ++n) body(n, mine);
  }
  for (int t = 0; t < used_threads; ++t) add(partial + size_t(t) * size_t(width));
}

}  // namespace strata::cpu
