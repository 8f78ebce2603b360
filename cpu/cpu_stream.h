// CPU streams: an ordered queue of work executed by one worker thread, so copies and
// host work genuinely overlap the compute running on the caller's thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"

namespace strata::cpu {

class CpuEvent final : public Event {
 public:
  void synchronize() override;
  bool ready() const override;
  // Blocks until recording `generation` (or a later one) has completed.
  void wait_for(uint64_t generation);
  uint64_t latest() const;  // the latest recording's generation
  // Called by the stream: arm before enqueueing (returns the recording's generation),
  // complete(generation) when the worker gets there. As with cudaEventRecord, the event
  // stands for its latest recording: an earlier recording's completion does not complete it.
  uint64_t arm();
  void complete(uint64_t generation, std::exception_ptr error);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t armed_ = 0, completed_ = 0;  // never recorded: complete, as in CUDA
  std::exception_ptr error_;
};

// A backend op held inline in a stream's queue: a function and its arguments by value, so
// enqueueing allocates nothing (std::function would, past two words of captures).
struct DeviceOp {
  void (*run)(const DeviceOp&) = nullptr;
  void* p[4] = {};
  int64_t i[4] = {};
  double d[2] = {};
  const void* ctx = nullptr;  // e.g. the backend or an argument block owned by the caller
};

// The compute stream: work runs at once on the calling thread (the CPU backend's ops are
// synchronous), events recorded on it are complete when recorded, and waiting on an event
// blocks the caller, as later compute must not start before it.
class InlineStream final : public Stream {
 public:
  void record(Event& e) override;
  void wait(Event& e) override { e.synchronize(); }
  void synchronize() override {}
  void launch_host(std::function<void()> fn) override { fn(); }
  double busy_seconds() const override { return 0; }
  const std::string& name() const override { return name_; }

 private:
  std::string name_ = "compute";
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name);
  ~CpuStream() override;
  // Work runs in order; once one item throws, later work is skipped (waits are kept and
  // events still fire, so an event still orders everything before it).
  void enqueue(std::function<void()> work);
  // A memcpy on the stream, held inline in the queue (no std::function: no allocation).
  void copy(void* dst, const void* src, size_t bytes);
  // A backend op on the stream, held inline as well.
  void op(const DeviceOp& op);
  void launch_host(std::function<void()> fn) override { enqueue(std::move(fn)); }
  void record(Event& e) override;
  void wait(Event& e) override;
  void synchronize() override;
  const std::string& name() const override { return name_; }
  double busy_seconds() const override;

 private:
  void run();
  std::string name_;
  mutable std::mutex mu_;
  std::condition_variable cv_work_, cv_idle_;
  // Work, or an event completion / wait (held inline, so recording allocates nothing).
  // Completions run even after a failure, so waiters never hang.
  enum class Kind : uint8_t { work, copy, op, complete, wait };
  struct Item {
    std::function<void()> fn;
    Kind kind = Kind::work;
    CpuEvent* event = nullptr;
    uint64_t generation = 0;
    void* dst = nullptr;  // copy
    const void* src = nullptr;
    size_t bytes = 0;
    DeviceOp op;  // op
  };
  void push(Item item);
  void push_event(Kind kind, CpuEvent& ev, uint64_t generation);
  // A ring that only ever grows, so a steady-state step enqueues without allocating.
  std::vector<Item> ring_;
  size_t head_ = 0, count_ = 0;
  bool stop_ = false, busy_ = false;
  double busy_s_ = 0;         // guarded by mu_
  std::exception_ptr error_;  // first failure; later work is skipped and the error rethrown
  std::thread worker_;
};

}  // namespace strata::cpu
