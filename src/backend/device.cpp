#include "backend/device.h"

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/op_scratch.h"
#include "kernels/math/scratch_sizes.h"
#ifdef STRATA_HAVE_CUDA
#include "kernels/cuda_backend.h"
#include "kernels/cuda_ops.h"
#endif

namespace strata {

namespace {

// What this build and machine offer for cuda.
struct CudaState {
  bool built = false;  // compiled with the CUDA kernels
  int gpus = 0;        // visible devices
  std::string why;     // why none are visible
};

CudaState cuda_state() {
  CudaState s;
#ifdef STRATA_HAVE_CUDA
  s.built = true;
  s.gpus = cuda::device_count(&s.why);
#endif
  return s;
}

// Why cuda cannot be had here ("" when it can).
std::string cuda_missing(const CudaState& s) {
  if (!s.built) return "this build has no CUDA (configure with -DSTRATA_CUDA=ON where nvcc and NCCL are installed)";
  if (s.gpus == 0) return "no GPU is visible (" + s.why + ")";
  return "";
}

}  // namespace

const char* device_choice_name(DeviceChoice d) {
  return d == DeviceChoice::cpu ? "cpu" : d == DeviceChoice::cuda ? "cuda" : "auto";
}

std::string resolve_device(const std::string& requested, std::string* note) {
  STRATA_CHECK(requested == "auto" || requested == "cpu" || requested == "cuda",
               "--device: '" + requested + "' is not auto, cpu or cuda", "use auto, cpu or cuda");
  if (requested == "cpu") return "cpu";
  const CudaState state = cuda_state();
  const std::string missing = cuda_missing(state);
  if (requested == "cuda") {
    STRATA_CHECK(missing.empty(), "--device cuda: " + missing, "use --device cpu (or auto)");
    return "cuda";
  }
  if (!missing.empty() && note && state.gpus > 0) *note = "--device auto chose the CPU: " + missing;
  return missing.empty() ? "cuda" : "cpu";
}

std::unique_ptr<Backend> make_backend(const std::string& requested, const DeviceOptions& opts) {
  const std::string device = resolve_device(requested);
#ifdef STRATA_HAVE_CUDA
  if (device == "cuda")
    return std::make_unique<cuda::CudaBackend>(cuda::CudaBackendOptions{opts.memory_bytes, opts.gpu});
#endif
  STRATA_CHECK(device == "cpu", "--device " + device + ": no backend", "this is a bug in device selection");
  return std::make_unique<cpu::CpuBackend>(cpu::CpuBackendOptions{opts.memory_bytes, opts.threads});
}

double op_scratch_bytes(const std::string& device, const OpShapes& shapes) {
  if (device == "cpu") return cpu::op_scratch_bytes(shapes);
  if (device == "cuda") return kernel_math::cuda_op_scratch_bytes(shapes);
  throw_error("no op scratch bound for device '" + device + "'", "use cpu or cuda");
}

}  // namespace strata
