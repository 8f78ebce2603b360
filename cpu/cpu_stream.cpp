#include "cpu/cpu_stream.h"

#include "core/error.h"

namespace strata::cpu {

void CpuEvent::arm() {
  std::lock_guard lock(mu_);
  done_ = false;
  error_ = nullptr;
}

void CpuEvent::complete(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    error_ = error;
  }
  cv_.notify_all();
}

void CpuEvent::synchronize() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool CpuEvent::ready() const {
  std::lock_guard lock(mu_);
  return done_;
}

CpuStream::CpuStream(std::string name) : name_(std::move(name)), worker_([this] { run(); }) {}

CpuStream::~CpuStream() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  worker_.join();
}

void CpuStream::enqueue(std::function<void()> work) { push({std::move(work), false}); }

void CpuStream::push(Item item) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
  }
  cv_work_.notify_one();
}

void CpuStream::record(Event& e) {
  auto& ev = dynamic_cast<CpuEvent&>(e);
  ev.arm();
  // The event carries the stream's first error so a waiter on another thread sees it.
  push({[this, &ev] {
          std::exception_ptr err;
          {
            std::lock_guard lock(mu_);
            err = error_;
          }
          ev.complete(err);
        },
        true});
}

void CpuStream::wait(Event& e) {
  auto& ev = dynamic_cast<CpuEvent&>(e);
  enqueue([&ev] { ev.synchronize(); });
}

void CpuStream::synchronize() {
  std::unique_lock lock(mu_);
  cv_idle_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (error_) {
    auto err = error_;
    error_ = nullptr;
    std::rethrow_exception(err);
  }
}

void CpuStream::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop requested and drained
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    bool skip = error_ != nullptr && !item.always;
    lock.unlock();
    std::exception_ptr err;
    if (!skip) {
      try {
        item.fn();
      } catch (...) {
        err = std::current_exception();
      }
    }
    lock.lock();
    if (err && !error_) error_ = err;
    busy_ = false;
    if (queue_.empty()) cv_idle_.notify_all();
  }
}

}  // namespace strata::cpu
