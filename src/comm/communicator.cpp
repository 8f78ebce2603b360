#include "comm/communicator.h"

#include <thread>

#include "core/error.h"

namespace strata {

std::string_view comm_type_name(CommType t) {
  switch (t) {
    case CommType::f32:
      return "f32";
    case CommType::f64:
      return "f64";
    case CommType::i32:
      return "i32";
    case CommType::i64:
      return "i64";
    case CommType::u8:
      return "u8";
    case CommType::u16:
      return "u16";
  }
  return "?";
}

size_t comm_type_size(CommType t) {
  switch (t) {
    case CommType::f64:
    case CommType::i64:
      return 8;
    case CommType::f32:
    case CommType::i32:
      return 4;
    case CommType::u16:
      return 2;
    case CommType::u8:
      return 1;
  }
  return 1;
}

void Communicator::set_topology(Topology t) {
  STRATA_CHECK(t.world() == size(),
               "a topology of " + std::to_string(t.world()) + " ranks for a communicator of " + std::to_string(size()),
               "this is a bug in the caller");
  topo_ = std::move(t);
  const int n = size(), l = topo_.local_size(rank());
  remote_fraction_ = n > 1 ? double(n - l) / double(n - 1) : 0.0;
}

std::unique_ptr<Communicator> Communicator::split(int) {
  throw_error("this communicator cannot be split into groups",
              "hierarchical partitioning (--hpz-partition-size) needs the MPI communicator");
}

void Communicator::run_call(const Call& c) {
  static constexpr const char* kNames[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
  if (test_hook_) [[unlikely]]
    test_hook_(kNames[int(c.op)]);
  switch (c.op) {
    case Op::all_reduce:
      return do_all_reduce(c.out, c.type, c.count, c.reduce);
    case Op::reduce_scatter:
      return do_reduce_scatter(c.in, c.out, c.type, c.count);
    case Op::all_gather:
      return do_all_gather(c.in, c.out, c.type, c.count);
    case Op::broadcast:
      return do_broadcast(c.out, c.type, c.count, c.root);
  }
}

void Communicator::bind(Backend& backend) {
  after_stream_calls();
  backend_ = &backend;
  done_ = backend.make_event();
  last_stream_ = nullptr;
}

void Communicator::enqueue(const Call& call, Stream& s) {
  STRATA_CHECK(backend_ != nullptr, "a collective on stream '" + s.name() + "' before bind(backend)",
               "this is a bug: bind the communicator to the backend that owns the buffers");
  Call c = call;
  c.in = backend_->transport_address(c.in);
  c.out = backend_->transport_address(c.out);
  // Calls reach the transport in enqueue order: a call on another stream than the last
  // one waits for the earlier calls first.
  if (last_stream_ && last_stream_ != &s) done_->synchronize();
  last_stream_ = &s;
  const size_t slot = next_slot_;
  if (slot_busy_[slot].load(std::memory_order_acquire)) {
    // 64 calls in flight: wait for them. Each has then run or (after a stream error) been
    // skipped, so every slot is free.
    done_->synchronize();
    for (auto& b : slot_busy_) b.store(false, std::memory_order_release);
  }
  next_slot_ = (slot + 1) % kSlots;
  calls_[slot] = c;
  slot_busy_[slot].store(true, std::memory_order_release);
  s.launch_host([this, slot] {
    run_call(calls_[slot]);
    slot_busy_[slot].store(false, std::memory_order_release);
  });
  s.record(*done_);
}

void Communicator::after_stream_calls() const {
  if (!done_) return;
  try {
    done_->synchronize();
  } catch (const std::exception&) {
    // That stream's failure is its owner's to report (at its synchronize); this call only
    // needed the earlier calls over.
  }
}

void Communicator::check_blocks(const char* op, size_t whole, size_t block) const {
  STRATA_CHECK(whole == block * size_t(size()),
               std::string(op) + ": " + std::to_string(whole) + " elements is not " + std::to_string(size()) +
                   " ranks × " + std::to_string(block),
               "the gathered/scattered buffer must hold exactly one block per rank");
}

}  // namespace strata
