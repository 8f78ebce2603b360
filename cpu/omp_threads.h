// The OpenMP team's size and this thread's number, 1 and 0 in a build without OpenMP: for
// ops that give each thread its own block of scratch.
#pragma once
#ifdef _OPENMP
#include <omp.h>
#endif

namespace strata::cpu {

inline int thread_count() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

inline int thread_id() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

}  // namespace strata::cpu
