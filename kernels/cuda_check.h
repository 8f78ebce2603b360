// Checks for every CUDA, cuBLAS and NCCL call: a cold, [[noreturn]] path that throws
// strata::Error with the statement, the error string, file:line and the device.
// Usable from .cu files (C++17) and .cpp files alike.
#pragma once
#include <cuda_runtime.h>

namespace strata::cuda {
[[noreturn]] void fail(const char* stmt, const char* error, const char* file, int line);
}  // namespace strata::cuda

#define STRATA_CUDA_CHECK(call)                                                                                       \
  do {                                                                                                                \
    cudaError_t strata_err_ = (call);                                                                                 \
    if (strata_err_ != cudaSuccess) ::strata::cuda::fail(#call, cudaGetErrorString(strata_err_), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, not at a later sync.
#define STRATA_CUDA_CHECK_LAUNCH() STRATA_CUDA_CHECK(cudaGetLastError())
