// Collectives over NCCL for device buffers, bootstrapped through MPI (rank 0 creates the
// unique id, MPI broadcasts it), one device per rank. Built when CUDA is; exercised on a
// GPU in S8. Operations are enqueued on stream() and return without a host sync: order
// them against compute with events, as the CUDA backend does.
#pragma once
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_comm.h"

namespace strata {

class NcclComm final : public Communicator {
 public:
  // `stream` is the cudaStream_t collectives run on (nullptr: a new non-blocking stream).
  NcclComm(MpiComm& bootstrap, int device, void* stream = nullptr);
  ~NcclComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host() const override { return host_; }
  void barrier() override;  // a 1-element all-reduce followed by a stream sync
  void* stream() const { return stream_; }

 protected:
  void do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) override;
  void do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) override;
  void do_all_gather(const void* in, void* out, CommType t, size_t count_in) override;
  void do_broadcast(void* data, CommType t, size_t count, int root) override;

 private:
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
  bool own_stream_ = false;
  int rank_ = 0, size_ = 1, device_ = 0;
  std::string host_;
  void* scratch_ = nullptr;  // one float on the device, for barrier()
};

}  // namespace strata
