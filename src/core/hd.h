// Element math shared by the CUDA kernels and their host builds. A function marked
// STRATA_HD compiles as __host__ __device__ under nvcc and as plain C++ elsewhere, so CI
// (no GPU) runs the very code the kernels run, against the CPU backend's reference.
// Everything here works on f32 values: loads and stores of bf16/f16 stay with each side.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__ __forceinline__
#else
#define STRATA_HD inline
#endif
