#include "cpu/cpu_stream.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace strata::cpu {

uint64_t CpuEvent::arm() {
  std::lock_guard lock(mu_);
  return ++armed_;
}

void CpuEvent::complete(uint64_t generation, std::exception_ptr error) {
  // Notified under the lock: a waiter that wakes may destroy the event at once, so the worker
  // must not touch it after unlocking (TSan found the notify racing the destructor).
  std::lock_guard lock(mu_);
  completed_ = std::max(completed_, generation);
  if (generation == armed_) error_ = error;
  cv_.notify_all();
}

void CpuEvent::synchronize() { wait_for(latest()); }

void CpuEvent::wait_for(uint64_t generation) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return completed_ >= generation; });
  if (error_) std::rethrow_exception(error_);
}

uint64_t CpuEvent::latest() const {
  std::lock_guard lock(mu_);
  return armed_;
}

bool CpuEvent::ready() const {
  std::lock_guard lock(mu_);
  return completed_ >= armed_;
}

// The ring starts deep enough for a step's worth of queued work (a stage-3 NVMe step queues
// a few hundred items ahead of a worker), so growing it stays out of the steady state.
CpuStream::CpuStream(std::string name) : name_(std::move(name)), ring_(1024), worker_([this] { run(); }) {}

CpuStream::~CpuStream() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  worker_.join();
}

void CpuStream::enqueue(std::function<void()> work) {
  Item item;
  item.fn = std::move(work);
  push(std::move(item));
}

void CpuStream::copy(void* dst, const void* src, size_t bytes) {
  Item item;
  item.kind = Kind::copy, item.dst = dst, item.src = src, item.bytes = bytes;
  push(std::move(item));
}

void CpuStream::op(const DeviceOp& op) {
  Item item;
  item.kind = Kind::op, item.op = op;
  push(std::move(item));
}

void CpuStream::push_event(Kind kind, CpuEvent& ev, uint64_t generation) {
  Item item;
  item.kind = kind, item.event = &ev, item.generation = generation;
  push(std::move(item));
}

void InlineStream::record(Event& e) {
  auto& ev = dynamic_cast<CpuEvent&>(e);
  ev.complete(ev.arm(), nullptr);
}

void CpuStream::push(Item item) {
  {
    std::lock_guard lock(mu_);
    if (count_ == ring_.size()) {  // grow: unroll the ring into a vector twice the size
      std::vector<Item> bigger(std::max<size_t>(16, 2 * ring_.size()));
      for (size_t i = 0; i < count_; ++i) bigger[i] = std::move(ring_[(head_ + i) % ring_.size()]);
      ring_ = std::move(bigger);
      head_ = 0;
    }
    ring_[(head_ + count_) % ring_.size()] = std::move(item);
    ++count_;
  }
  cv_work_.notify_one();
}

void CpuStream::record(Event& e) {
  auto& ev = dynamic_cast<CpuEvent&>(e);
  // The event carries the stream's first error so a waiter on another thread sees it.
  push_event(Kind::complete, ev, ev.arm());
}

void CpuStream::wait(Event& e) {
  // Later work waits for the event's latest recording as of now (cudaStreamWaitEvent).
  auto& ev = dynamic_cast<CpuEvent&>(e);
  push_event(Kind::wait, ev, ev.latest());
}

double CpuStream::busy_seconds() const {
  std::lock_guard lock(mu_);
  return busy_s_;
}

void CpuStream::synchronize() {
  std::unique_lock lock(mu_);
  cv_idle_.wait(lock, [&] { return count_ == 0 && !busy_; });
  if (error_) {
    auto err = error_;
    error_ = nullptr;
    std::rethrow_exception(err);
  }
}

void CpuStream::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || count_ > 0; });
    if (count_ == 0) return;  // stop requested and drained
    Item item = std::move(ring_[head_]);
    ring_[head_].fn = nullptr;
    head_ = (head_ + 1) % ring_.size();
    --count_;
    busy_ = true;
    // After an error, work is skipped but waits are kept: an event recorded after them must
    // still mean "everything upstream is done", or a buffer is handed on while another stream
    // still reads it (TSan found a staging buffer reused that way after an NVMe fault).
    const bool skip =
        error_ != nullptr && (item.kind == Kind::work || item.kind == Kind::copy || item.kind == Kind::op);
    const std::exception_ptr carried = error_;
    lock.unlock();
    std::exception_ptr err;
    double ran = 0;
    if (item.kind == Kind::complete) {
      item.event->complete(item.generation, carried);
    } else if (!skip) {
      const auto t0 = std::chrono::steady_clock::now();
      try {
        if (item.kind == Kind::wait)
          item.event->wait_for(item.generation);
        else if (item.kind == Kind::copy)
          std::memcpy(item.dst, item.src, item.bytes);
        else if (item.kind == Kind::op)
          item.op.run(item.op);
        else
          item.fn();
      } catch (...) {
        err = std::current_exception();
      }
      if (item.kind != Kind::wait) ran = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    lock.lock();
    busy_s_ += ran;
    if (err && !error_) error_ = err;
    busy_ = false;
    if (count_ == 0) cv_idle_.notify_all();
  }
}

}  // namespace strata::cpu
