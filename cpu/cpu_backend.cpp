#include "cpu/cpu_backend.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/cpu_stream.h"
#include "cpu/host_memory.h"
#include "cpu/ops.h"

namespace strata::cpu {

CpuBackend::CpuBackend(CpuBackendOptions opts)
    : budget_("device", opts.device_mem_bytes),
      ws_([this](size_t bytes, const std::string& tag) { return allocate(bytes, tag); }) {
#ifdef _OPENMP
  if (opts.threads > 0) omp_set_num_threads(opts.threads);
#endif
}

Buffer CpuBackend::allocate(size_t bytes, const std::string& tag) {
  budget_.charge(bytes, "'" + tag + "'");
  // STRATA_TRACE_ALLOC=1 lists every device allocation (what fills a budget).
  static const bool trace = std::getenv("STRATA_TRACE_ALLOC") != nullptr;
  if (trace) std::fprintf(stderr, "strata: device allocation '%s' %zu bytes\n", tag.c_str(), bytes);
  void* p = nullptr;
  try {
    p = host_alloc(bytes, tag.c_str());
  } catch (...) {
    budget_.release(bytes);
    throw;
  }
  return Buffer(p, bytes, Tier::device, tag, [this](void* ptr, size_t n) {
    cpu::host_free(ptr, n);
    budget_.release(n);
  });
}

void* CpuBackend::host_allocate(size_t bytes, bool pinned, const std::string& tag) {
  void* p = cpu::host_alloc(bytes, tag.c_str());
  if (pinned && p) {
    try {
      cpu::host_lock(p, bytes, tag.c_str());
    } catch (...) {
      cpu::host_free(p, bytes);
      throw;
    }
  }
  return p;
}

void CpuBackend::host_free(void* p, size_t bytes, bool pinned) {
  if (pinned && p) cpu::host_unlock(p, bytes);
  cpu::host_free(p, bytes);
}

std::unique_ptr<Stream> CpuBackend::make_stream(const std::string& name) { return std::make_unique<CpuStream>(name); }
std::unique_ptr<Event> CpuBackend::make_event() { return std::make_unique<CpuEvent>(); }

void CpuBackend::copy_async(void* dst, const void* src, size_t bytes, Stream& s) {
  dynamic_cast<CpuStream&>(s).copy(dst, src, bytes);
}

void CpuBackend::encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe) {
  cpu::encoder_forward(out, tokens, wte, wpe);
}
void CpuBackend::encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens) {
  cpu::encoder_backward(dwte, dwpe, dout, tokens);
}
void CpuBackend::layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                                   TensorView bias) {
  cpu::layernorm_forward(out, mean, rstd, inp, weight, bias);
}
void CpuBackend::layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                    TensorView inp, TensorView weight, TensorView mean, TensorView rstd) {
  cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, ws_);
}
void CpuBackend::matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  cpu::matmul_forward(out, inp, weight, bias, ws_);
}
void CpuBackend::matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                                 TensorView weight) {
  cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, ws_);
}
void CpuBackend::attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head) {
  cpu::attention_forward(out, lse, qkv, n_head, ws_);
}
void CpuBackend::attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                                    int n_head) {
  cpu::attention_backward(dqkv, dout, qkv, out, lse, n_head, ws_);
}
void CpuBackend::gelu_forward(TensorView out, TensorView inp) { cpu::gelu_forward(out, inp); }
void CpuBackend::gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  cpu::gelu_backward(dinp, inp, dout);
}
void CpuBackend::residual_forward(TensorView out, TensorView a, TensorView b) { cpu::residual_forward(out, a, b); }
double CpuBackend::cross_entropy_forward_backward(TensorView losses, TensorView logits,
                                                  std::span<const int32_t> targets, int vocab, float dloss) {
  return cpu::cross_entropy_forward_backward(losses, logits, targets, vocab, dloss);
}
void CpuBackend::cast(TensorView dst, TensorView src) { cpu::cast(dst, src); }
double CpuBackend::sum_squares(TensorView x) { return cpu::sum_squares(x); }

}  // namespace strata::cpu
