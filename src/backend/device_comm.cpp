#include "backend/device_comm.h"

#include "comm/mpi_comm.h"
#include "core/error.h"
#ifdef STRATA_HAVE_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/nccl_comm.h"
#endif

namespace strata {

std::unique_ptr<Communicator> make_device_comm(Communicator* comm, Backend& backend) {
  Stream& probe = backend.compute_stream();
  if (!comm || comm->size() == 1 || probe.native_handle() == nullptr) return nullptr;
#ifdef STRATA_HAVE_CUDA
  auto* mpi = dynamic_cast<MpiComm*>(comm);
  STRATA_CHECK(mpi != nullptr, "the CUDA backend across ranks needs the MPI communicator to bootstrap NCCL",
               "launch with mpirun");
  int device = 0;
  STRATA_CUDA_CHECK(cudaGetDevice(&device));  // the backend's: it set it on this thread
  return std::make_unique<NcclComm>(*mpi, device);
#else
  throw_error("a backend with native streams in a build without CUDA", "this is a bug");
#endif
}

}  // namespace strata
