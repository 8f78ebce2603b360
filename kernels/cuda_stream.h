// Streams and events of the CUDA backend, one to one with cudaStream_t and cudaEvent_t.
// Host work on a stream (launch_host) runs through cudaLaunchHostFunc from a fixed ring of
// slots, so launching it allocates nothing; an exception it throws is kept and rethrown by
// the stream's synchronize() (and by events recorded after it), as the CPU streams do.
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "backend/backend.h"

namespace strata::cuda {

class CudaStream final : public Stream {
 public:
  explicit CudaStream(std::string name);
  ~CudaStream() override;
  void record(Event& e) override;
  void wait(Event& e) override;
  void synchronize() override;
  void launch_host(std::function<void()> fn) override;
  // The time host work on this stream has run. Kernels and copies are not timed here (that
  // would need an event pair per launch); the step timeline takes device time from the
  // compute and comm waits instead.
  double busy_seconds() const override { return double(busy_ns_.load()) * 1e-9; }
  const std::string& name() const override { return name_; }
  void* native_handle() const override { return stream_; }
  // The first error of host work on this stream, not cleared (events recorded after it).
  std::exception_ptr host_error() const;

 private:
  struct HostTask {
    CudaStream* owner = nullptr;
    std::function<void()> fn;
    std::atomic<bool> busy{false};
  };
  static void run_host_task(void* task);
  static constexpr int kHostSlots = 256;
  std::string name_;
  void* stream_ = nullptr;  // cudaStream_t
  HostTask tasks_[kHostSlots];
  int next_task_ = 0;
  std::atomic<int64_t> busy_ns_{0};
  mutable std::mutex error_mu_;
  std::exception_ptr error_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent();
  ~CudaEvent() override;
  void synchronize() override;
  bool ready() const override;
  void* handle() const { return event_; }
  void recorded_on(const CudaStream* s) { stream_ = s; }

 private:
  void* event_ = nullptr;  // cudaEvent_t
  const CudaStream* stream_ = nullptr;
};

}  // namespace strata::cuda
