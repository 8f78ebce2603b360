// The communicator the engine's device buffers need: the host transport itself where the
// backend's device memory is host memory (CPU backend: MPI), NCCL over it where streams are
// CUDA streams. Collective across ranks when it builds NCCL.
#pragma once
#include <memory>

#include "backend/backend.h"
#include "comm/communicator.h"

namespace strata {

// nullptr: use `comm` as it is. Otherwise the communicator to hand the engine (it keeps
// `comm` for its host collectives and its counters).
std::unique_ptr<Communicator> make_device_comm(Communicator* comm, Backend& backend);

}  // namespace strata
