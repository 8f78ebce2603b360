#include "kernels/cuda_check.h"

#include <string>

#include "core/error.h"
#include "kernels/cuda_ops.h"

namespace strata::cuda {

void fail(const char* stmt, const char* error, const char* file, int line) {
  int dev = -1;
  cudaGetDevice(&dev);
  throw_error(std::string(stmt) + " failed: " + error + " (device " + std::to_string(dev) + ", " + file + ":" +
                  std::to_string(line) + ")",
              "check the GPU with nvidia-smi; out-of-memory means the plan exceeds the device budget");
}

int device_count(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = cudaGetErrorString(e);
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device";
  return n;
}

}  // namespace strata::cuda
