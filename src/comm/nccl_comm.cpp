#include "comm/nccl_comm.h"

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
                                std::to_string(rank_) + ", host " + host_ + ")",                             \
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

}  // namespace

NcclComm::NcclComm(MpiComm& bootstrap, int device, void* stream)
    : rank_(bootstrap.rank()), size_(bootstrap.size()), device_(device), host_(bootstrap.host()) {
  set_topology(bootstrap.topology());
  STRATA_CUDA_CHECK(cudaSetDevice(device_));
  ncclUniqueId id;
  if (rank_ == 0) STRATA_NCCL_CHECK(ncclGetUniqueId(&id));
  std::span<uint8_t> id_bytes(reinterpret_cast<uint8_t*>(&id), sizeof id);
  bootstrap.broadcast(id_bytes, 0);
  ncclComm_t comm;
  STRATA_NCCL_CHECK(ncclCommInitRank(&comm, size_, id, rank_));
  comm_ = comm;
  if (stream) {
    stream_ = stream;
  } else {
    cudaStream_t s;
    STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s, own_stream_ = true;
  }
  STRATA_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
  if (own_stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  if (scratch_) cudaFree(scratch_);
}

void NcclComm::do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) {
  STRATA_NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(t), nccl_op(op), static_cast<ncclComm_t>(comm_),
                                  static_cast<cudaStream_t>(stream_)));
  count_sent(2.0 * double(size_ - 1) / double(size_) * double(count), t);
}

void NcclComm::do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) {
  STRATA_NCCL_CHECK(ncclReduceScatter(in, out, count_out, nccl_type(t), ncclSum, static_cast<ncclComm_t>(comm_),
                                      static_cast<cudaStream_t>(stream_)));
  count_sent(double(size_ - 1) * double(count_out), t);
}

void NcclComm::do_all_gather(const void* in, void* out, CommType t, size_t count_in) {
  STRATA_NCCL_CHECK(ncclAllGather(in, out, count_in, nccl_type(t), static_cast<ncclComm_t>(comm_),
                                  static_cast<cudaStream_t>(stream_)));
  count_sent(double(size_ - 1) * double(count_in), t);
}

void NcclComm::do_broadcast(void* data, CommType t, size_t count, int root) {
  STRATA_NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type(t), root, static_cast<ncclComm_t>(comm_),
                                  static_cast<cudaStream_t>(stream_)));
  count_sent(size_ > 1 ? double(count) : 0.0, t);
}

void NcclComm::barrier() {
  STRATA_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_),
                                  static_cast<cudaStream_t>(stream_)));
  STRATA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
}

}  // namespace strata
