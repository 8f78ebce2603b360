// Collectives for the CUDA backend: NCCL on device buffers, enqueued on the engine's CUDA
// streams (Communicator's stream API), bootstrapped through MPI (rank 0 makes the unique
// id, MPI broadcasts it), one GPU per rank. The blocking API (host buffers: the loss, the
// norm, checkpoint agreement) goes to the MPI communicator it was bootstrapped from. Both
// count into that communicator's counters, so the run's volumes stay one set of numbers.
#pragma once
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_comm.h"

namespace strata {

class NcclComm final : public Communicator {
 public:
  // `device` is this rank's CUDA device (the backend's); the MPI communicator outlives this.
  NcclComm(MpiComm& bootstrap, int device);
  ~NcclComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host() const override { return host_comm_->host(); }
  void barrier() override { host_comm_->barrier(); }
  // hpZ's groups: ncclCommSplit for the device side, the MPI split for the host side.
  std::unique_ptr<Communicator> split(int color) override;

 protected:
  void enqueue(const Call& c, Stream& s) override;
  void do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) override;
  void do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) override;
  void do_all_gather(const void* in, void* out, CommType t, size_t count_in) override;
  void do_broadcast(void* data, CommType t, size_t count, int root) override;

 private:
  NcclComm(std::unique_ptr<Communicator> group, void* comm, int device, Communicator& counters);
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1, device_ = 0;
  Communicator* host_comm_;                   // the blocking collectives' transport
  std::unique_ptr<Communicator> owned_host_;  // a split's own MPI group
};

}  // namespace strata
