// Collectives across data-parallel ranks, on typed spans (element counts, never bytes).
//
// Every implementation counts the elements this rank sends, by the ring algorithms'
// volumes that nccl-tests' bus bandwidth is defined by (N ranks, `count` elements):
//   all_reduce      2·(N-1)/N·count      reduce_scatter  (N-1)·count_out
//   all_gather      (N-1)·count_in       broadcast       count (pipelined ring)
// so ZeRO's communication volume is measured, not computed (the ZeRO engine's accounting tests).
//
// The bytes are also split by where they go: a collective's volume is spread over this
// rank's N-1 peers, L-1 of them on its own node and N-L on other nodes (L ranks on the
// node), so inter_node_bytes = bytes·(N-L)/(N-1). For an all-gather that is exactly the
// blocks that must leave the node; a hierarchical algorithm moves them once per node pair,
// a flat ring more often, so the counter is the volume the partitioning decides, which is
// what hierarchical partitioning (hpZ) cuts.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "backend/backend.h"
#include "comm/topology.h"

namespace strata {

enum class ReduceOp { sum, max, min };
// u16 carries bf16/f16 payloads through gathers and broadcasts (never reduced).
enum class CommType { f32, f64, i32, i64, u8, u16 };

template <typename T>
constexpr CommType comm_type_of();
template <>
constexpr CommType comm_type_of<float>() {
  return CommType::f32;
}
template <>
constexpr CommType comm_type_of<double>() {
  return CommType::f64;
}
template <>
constexpr CommType comm_type_of<int32_t>() {
  return CommType::i32;
}
template <>
constexpr CommType comm_type_of<int64_t>() {
  return CommType::i64;
}
template <>
constexpr CommType comm_type_of<uint8_t>() {
  return CommType::u8;
}
template <>
constexpr CommType comm_type_of<uint16_t>() {
  return CommType::u16;
}
std::string_view comm_type_name(CommType t);

struct CommCounters {
  uint64_t elements_sent = 0;  // by the ring volumes above
  uint64_t bytes_sent = 0;     // the same volumes in bytes of each call's element type
  uint64_t calls = 0;
  uint64_t intra_node_bytes = 0, inter_node_bytes = 0;  // bytes_sent by where the peers are
};
size_t comm_type_size(CommType t);

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string host() const = 0;

  template <typename T>
  void all_reduce(std::span<T> data, ReduceOp op = ReduceOp::sum) {
    after_stream_calls();
    if (test_hook_) [[unlikely]]
      test_hook_("all_reduce");
    do_all_reduce(data.data(), comm_type_of<T>(), data.size(), op);
  }
  // in has size()·out.size() elements; rank r receives the reduced block r.
  template <typename T>
  void reduce_scatter(std::span<const T> in, std::span<T> out) {
    check_blocks("reduce_scatter", in.size(), out.size());
    after_stream_calls();
    if (test_hook_) [[unlikely]]
      test_hook_("reduce_scatter");
    do_reduce_scatter(in.data(), out.data(), comm_type_of<T>(), out.size());
  }
  // out has size()·in.size() elements; block r is rank r's input.
  template <typename T>
  void all_gather(std::span<const T> in, std::span<T> out) {
    check_blocks("all_gather", out.size(), in.size());
    after_stream_calls();
    if (test_hook_) [[unlikely]]
      test_hook_("all_gather");
    do_all_gather(in.data(), out.data(), comm_type_of<T>(), in.size());
  }
  template <typename T>
  void broadcast(std::span<T> data, int root) {
    after_stream_calls();
    if (test_hook_) [[unlikely]]
      test_hook_("broadcast");
    do_broadcast(data.data(), comm_type_of<T>(), data.size(), root);
  }
  virtual void barrier() = 0;

  // ---- on a stream (device memory) ----
  // The collective is enqueued on s after the work already there; later work on s runs
  // after it completes, and an event recorded on s after it signals completion (NCCL's
  // model). The caller does not wait. Buffers are device memory of `backend` (bind first);
  // a transport that runs on the host (MPI) is handed backend.transport_address() of them,
  // progressed by the stream's worker.
  void bind(Backend& backend);
  template <typename T>
  void all_reduce(std::span<T> data, ReduceOp op, Stream& s) {
    enqueue({Op::all_reduce, comm_type_of<T>(), op, data.data(), data.data(), data.size(), 0}, s);
  }
  template <typename T>
  void reduce_scatter(std::span<const T> in, std::span<T> out, Stream& s) {
    check_blocks("reduce_scatter", in.size(), out.size());
    enqueue({Op::reduce_scatter, comm_type_of<T>(), ReduceOp::sum, in.data(), out.data(), out.size(), 0}, s);
  }
  template <typename T>
  void all_gather(std::span<const T> in, std::span<T> out, Stream& s) {
    check_blocks("all_gather", out.size(), in.size());
    enqueue({Op::all_gather, comm_type_of<T>(), ReduceOp::sum, in.data(), out.data(), in.size(), 0}, s);
  }

  // The node of every rank; ranks learn their node and local rank from it.
  const Topology& topology() const { return topo_; }
  int node() const { return topo_.node(rank()); }
  int nodes() const { return topo_.nodes(); }
  int local_rank() const { return topo_.local_rank(rank()); }
  int local_size() const { return topo_.local_size(rank()); }
  // Replaces the topology (tests simulate nodes on one host); collective in effect: every
  // rank must set the same one.
  void set_topology(Topology t);
  // A communicator over the ranks that pass the same color, ordered by rank (collective:
  // every rank calls it). Its collectives count into this communicator's counters.
  virtual std::unique_ptr<Communicator> split(int color);

  const CommCounters& counters() const { return *sink_; }
  // Test seam: called (on the calling thread) before every collective; lets a test delay a
  // collective until the compute thread has made progress, which proves overlap.
  void set_test_hook(std::function<void(std::string_view op)> hook) { test_hook_ = std::move(hook); }
  void reset_counters() { *sink_ = {}; }

 protected:
  enum class Op : uint8_t { all_reduce, reduce_scatter, all_gather, broadcast };
  struct Call {
    Op op;
    CommType type;
    ReduceOp reduce;
    const void* in;
    void* out;
    size_t count;  // the do_* functions' count
    int root;
  };
  // Enqueues `c` on s. This default runs the blocking do_* call on the stream's worker
  // (launch_host) with transport addresses: right for MPI on the CPU backend. A transport
  // that launches on device streams itself (NCCL with the CUDA backend) overrides it.
  virtual void enqueue(const Call& c, Stream& s);
  void run_call(const Call& c);  // the blocking collective, counted and hooked
  // A blocking (host-memory) collective starts after this rank's collectives already
  // enqueued on streams have run: every rank then issues them to the transport in the
  // same order, as MPI requires of one communicator.
  void after_stream_calls() const;
  virtual void do_all_reduce(void* data, CommType t, size_t count, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* in, void* out, CommType t, size_t count_out) = 0;
  virtual void do_all_gather(const void* in, void* out, CommType t, size_t count_in) = 0;
  virtual void do_broadcast(void* data, CommType t, size_t count, int root) = 0;
  void count_sent(double elements, CommType t) {
    const uint64_t n = uint64_t(elements + 0.5), inter = uint64_t(elements * remote_fraction_ + 0.5);
    CommCounters& c = *sink_;
    c.elements_sent += n;
    c.bytes_sent += n * comm_type_size(t);
    c.inter_node_bytes += inter * comm_type_size(t);
    c.intra_node_bytes += (n - inter) * comm_type_size(t);
    ++c.calls;
  }
  // A split communicator counts into its parent's counters (which outlive it).
  void count_into(Communicator& parent) { sink_ = parent.sink_; }

 private:
  void check_blocks(const char* op, size_t whole, size_t block) const;
  CommCounters counters_;
  CommCounters* sink_ = &counters_;
  Topology topo_;
  double remote_fraction_ = 0;  // (N-L)/(N-1): the share of this rank's peers on other nodes
  std::function<void(std::string_view)> test_hook_;
  Backend* backend_ = nullptr;
  // Calls in flight on streams: the work item carries only (this, slot), so launching it
  // allocates nothing; a slot is reused once its call has run.
  static constexpr size_t kSlots = 64;
  Call calls_[kSlots] = {};
  std::atomic<bool> slot_busy_[kSlots] = {};
  size_t next_slot_ = 0;
  // Recorded after every enqueued call: completes (even when the stream failed and skipped
  // the call) once every call enqueued so far is over. Calls go on one stream at a time.
  std::unique_ptr<Event> done_;
  Stream* last_stream_ = nullptr;
};

}  // namespace strata
