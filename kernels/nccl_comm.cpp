#include "kernels/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace strata {

namespace {

#define STRATA_NCCL_CHECK(call)                                                                              \
  do {                                                                                                       \
    ncclResult_t strata_nr_ = (call);                                                                        \
    if (strata_nr_ != ncclSuccess) [[unlikely]]                                                              \
      ::strata::throw_error(std::string(#call " failed: ") + ncclGetErrorString(strata_nr_) + " (rank " +    \
                                std::to_string(rank_) + ", host " + host() + ")",                            \
                            "set NCCL_DEBUG=INFO for details; check NCCL_SOCKET_IFNAME on multi-host runs"); \
  } while (0)

ncclDataType_t nccl_type(CommType t) {
  switch (t) {
    case CommType::f32:
      return ncclFloat32;
    case CommType::f64:
      return ncclFloat64;
    case CommType::i32:
      return ncclInt32;
    case CommType::i64:
      return ncclInt64;
    case CommType::u8:
      return ncclUint8;
    case CommType::u16:
      return ncclBfloat16;  // same width; gathers and broadcasts only
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

// Calls f(T{}) with T the element type of t: the blocking API is typed.
template <typename F>
void with_type(CommType t, F&& f) {
  switch (t) {
    case CommType::f32:
      return f(float{});
    case CommType::f64:
      return f(double{});
    case CommType::i32:
      return f(int32_t{});
    case CommType::i64:
      return f(int64_t{});
    case CommType::u8:
      return f(uint8_t{});
    case CommType::u16:
      return f(uint16_t{});
  }
}

}  // namespace

NcclComm::NcclComm(MpiComm& bootstrap, int device)
    : rank_(bootstrap.rank()), size_(bootstrap.size()), device_(device), host_comm_(&bootstrap) {
  set_topology(bootstrap.topology());
  count_into(bootstrap);
  STRATA_CUDA_CHECK(cudaSetDevice(device_));
  ncclUniqueId id;
  if (rank_ == 0) STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
  bootstrap.broadcast(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&id), sizeof id), 0);
  ncclComm_t comm;
  STRATA_NCCL_CHECK(ncclCommInitRank(&comm, size_, id, rank_));
  comm_ = comm;
}

NcclComm::NcclComm(std::unique_ptr<Communicator> group, void* comm, int device, Communicator& counters)
    : comm_(comm),
      rank_(group->rank()),
      size_(group->size()),
      device_(device),
      host_comm_(group.get()),
      owned_host_(std::move(group)) {
  set_topology(host_comm_->topology());
  count_into(counters);
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
}

std::unique_ptr<Communicator> NcclComm::split(int color) {
  std::unique_ptr<Communicator> group = host_comm_->split(color);
  ncclComm_t sub;
  STRATA_NCCL_CHECK(ncclCommSplit(static_cast<ncclComm_t>(comm_), color, rank_, &sub, nullptr));
  return std::unique_ptr<Communicator>(new NcclComm(std::move(group), sub, device_, *this));
}

void NcclComm::enqueue(const Call& c, Stream& s) {
  auto* st = static_cast<cudaStream_t>(s.native_handle());
  STRATA_CHECK(st != nullptr, "an NCCL collective on stream '" + s.name() + "', which is not a CUDA stream",
               "this is a bug: NCCL runs with the CUDA backend only");
  auto* comm = static_cast<ncclComm_t>(comm_);
  const double n = double(c.count), peers = double(size_ - 1);
  switch (c.op) {
    case Op::all_reduce:
      STRATA_NCCL_CHECK(ncclAllReduce(c.in, c.out, c.count, nccl_type(c.type), nccl_op(c.reduce), comm, st));
      return count_sent(2.0 * peers / double(size_) * n, c.type);
    case Op::reduce_scatter:
      STRATA_NCCL_CHECK(ncclReduceScatter(c.in, c.out, c.count, nccl_type(c.type), nccl_op(c.reduce), comm, st));
      return count_sent(peers * n, c.type);
    case Op::all_gather:
      STRATA_NCCL_CHECK(ncclAllGather(c.in, c.out, c.count, nccl_type(c.type), comm, st));
      return count_sent(peers * n, c.type);
    case Op::broadcast:
      STRATA_NCCL_CHECK(ncclBroadcast(c.in, c.out, c.count, nccl_type(c.type), c.root, comm, st));
      return count_sent(size_ > 1 ? n : 0.0, c.type);
  }
}

// Host buffers: the MPI communicator's collectives (they count themselves).
void NcclComm::do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) {
  with_type(t, [&]<typename T>(T) { host_comm_->all_reduce(std::span<T>(static_cast<T*>(data), count), op); });
}
void NcclComm::do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) {
  with_type(t, [&]<typename T>(T) {
    host_comm_->reduce_scatter(std::span<const T>(static_cast<const T*>(in), count_out * size_t(size_)),
                               std::span<T>(static_cast<T*>(out), count_out));
  });
}
void NcclComm::do_all_gather(const void* in, void* out, CommType t, size_t count_in) {
  with_type(t, [&]<typename T>(T) {
    host_comm_->all_gather(std::span<const T>(static_cast<const T*>(in), count_in),
                           std::span<T>(static_cast<T*>(out), count_in * size_t(size_)));
  });
}
void NcclComm::do_broadcast(void* data, CommType t, size_t count, int root) {
  with_type(t, [&]<typename T>(T) { host_comm_->broadcast(std::span<T>(static_cast<T*>(data), count), root); });
}

}  // namespace strata
