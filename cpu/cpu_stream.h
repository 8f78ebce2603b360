// CPU streams: an ordered queue of work executed by one worker thread, so copies and
// host work genuinely overlap the compute running on the caller's thread.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "backend/backend.h"

namespace strata::cpu {

class CpuEvent final : public Event {
 public:
  void synchronize() override;
  bool ready() const override;
  // Called by the stream: arm before enqueueing, complete when the worker gets there.
  void arm();
  void complete(std::exception_ptr error);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = true;  // an event never recorded is complete, as in CUDA
  std::exception_ptr error_;
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name);
  ~CpuStream() override;
  // Work runs in order; once one item throws, later items are skipped (events still fire).
  void enqueue(std::function<void()> work);
  void record(Event& e) override;
  void wait(Event& e) override;
  void synchronize() override;
  const std::string& name() const override { return name_; }

 private:
  void run();
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_idle_;
  struct Item {
    std::function<void()> fn;
    bool always;  // event completions run even after a failure, so waiters never hang
  };
  void push(Item item);
  std::deque<Item> queue_;
  bool stop_ = false, busy_ = false;
  std::exception_ptr error_;  // first failure; later work is skipped and the error rethrown
  std::thread worker_;
};

}  // namespace strata::cpu
