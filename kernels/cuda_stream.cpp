#include "kernels/cuda_stream.h"

#include <chrono>
#include <thread>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace strata::cuda {

CudaStream::CudaStream(std::string name) : name_(std::move(name)) {
  cudaStream_t s;
  // Non-blocking: no implicit ordering with the legacy default stream (cudaMemcpy elsewhere).
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  for (HostTask& t : tasks_) t.owner = this;
}

CudaStream::~CudaStream() {
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));  // host tasks must not outlive their slots
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void CudaStream::record(Event& e) {
  auto& ce = dynamic_cast<CudaEvent&>(e);
  STRATA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(ce.handle()), static_cast<cudaStream_t>(stream_)));
  ce.recorded_on(this);
}

void CudaStream::wait(Event& e) {
  auto& ce = dynamic_cast<CudaEvent&>(e);
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(ce.handle()), 0));
}

void CudaStream::synchronize() {
  STRATA_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  std::exception_ptr e;
  {
    std::lock_guard lock(error_mu_);
    std::swap(e, error_);  // reported once, as the CPU streams do
  }
  if (e) std::rethrow_exception(e);
}

std::exception_ptr CudaStream::host_error() const {
  std::lock_guard lock(error_mu_);
  return error_;
}

void CudaStream::run_host_task(void* p) {
  auto* t = static_cast<HostTask*>(p);
  CudaStream* s = t->owner;
  bool skip;
  {
    std::lock_guard lock(s->error_mu_);
    skip = s->error_ != nullptr;  // after a failure later host work is skipped
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!skip) {
    try {
      t->fn();
    } catch (...) {
      std::lock_guard lock(s->error_mu_);
      if (!s->error_) s->error_ = std::current_exception();
    }
  }
  s->busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  t->fn = nullptr;
  t->busy.store(false, std::memory_order_release);
}

void CudaStream::launch_host(std::function<void()> fn) {
  HostTask& t = tasks_[next_task_];
  next_task_ = (next_task_ + 1) % kHostSlots;
  // A slot is free once its task ran; 256 host tasks in flight on one stream means the
  // stream is far behind, so waiting here is the back-pressure the CPU streams' queue has.
  while (t.busy.load(std::memory_order_acquire)) std::this_thread::yield();
  t.fn = std::move(fn);
  t.busy.store(true, std::memory_order_release);
  STRATA_CUDA_CHECK(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream_), run_host_task, &t));
}

CudaEvent::CudaEvent() {
  cudaEvent_t e;
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  event_ = e;
}

CudaEvent::~CudaEvent() { cudaEventDestroy(static_cast<cudaEvent_t>(event_)); }

void CudaEvent::synchronize() {
  STRATA_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)));
  if (stream_)
    if (std::exception_ptr e = stream_->host_error()) std::rethrow_exception(e);
}

bool CudaEvent::ready() const {
  const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (e == cudaErrorNotReady) return false;
  STRATA_CUDA_CHECK(e);
  return true;
}

}  // namespace strata::cuda
