// --device auto|cpu|cuda: which backend a run gets. The only place outside cpu/ and kernels/
// that names a concrete backend; everything else holds a Backend&.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/op_shapes.h"

namespace strata {

struct DeviceOptions {
  size_t memory_bytes = size_t(8) << 30;  // the device's budget
  int threads = 0;                        // the CPU backend's threads for ops (0: all)
  int gpu = 0;  // the CUDA device (modulo the visible ones): a rank's local rank, one GPU each
};

// --device as parsed: auto, cpu or cuda.
enum class DeviceChoice { automatic, cpu, cuda };
// "auto", "cpu" or "cuda".
const char* device_choice_name(DeviceChoice d);

// What a request resolves to here: "cpu" or "cuda". auto: cuda when this build has CUDA and a
// GPU is visible, else cpu (`note` says why not cuda when it matters).
// cuda without one of those is an Error saying which is missing.
std::string resolve_device(const std::string& requested, std::string* note = nullptr);
inline std::string resolve_device(DeviceChoice requested, std::string* note = nullptr) {
  return resolve_device(device_choice_name(requested), note);
}
std::unique_ptr<Backend> make_backend(const std::string& requested, const DeviceOptions& opts);

// An upper bound of what backend `device` ("cpu" or "cuda") allocates as op scratch for a step
// of these shapes, beside the engine's and the model's buffers: each backend states its own,
// so the plan follows its kernels. Known in every build (a CPU-only build plans GPU runs).
double op_scratch_bytes(const std::string& device, const OpShapes& shapes);

}  // namespace strata
