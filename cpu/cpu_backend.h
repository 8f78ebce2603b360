// The CPU backend: a real device with a memory budget, worker-thread streams, and the
// transformer ops on oneDNN (matmuls) and OpenMP (everything else).
#pragma once
#include <memory>

#include "backend/backend.h"
#include "cpu/ops.h"
#include "cpu/workspace.h"

namespace strata::cpu {

struct CpuBackendOptions {
  size_t device_mem_bytes = size_t(8) << 30;  // the "device" budget
  int threads = 0;                            // OpenMP threads for ops; 0 = all available
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions opts);
  std::string name() const override { return "cpu"; }

  Buffer allocate(size_t bytes, const std::string& tag) override;
  MemoryBudget& budget() override { return budget_; }
  void* host_allocate(size_t bytes, bool pinned, const std::string& tag) override;
  void host_free(void* p, size_t bytes, bool pinned) override;

  std::unique_ptr<Stream> make_stream(const std::string& name) override;
  std::unique_ptr<Event> make_event() override;
  void copy_async(void* dst, const void* src, size_t bytes, Stream& s) override;

  void encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe) override;
  void encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens) override;
  void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                         TensorView bias) override;
  void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                          TensorView weight, TensorView mean, TensorView rstd) override;
  void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) override;
  void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                       TensorView weight) override;
  void attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head) override;
  void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                          int n_head) override;
  void gelu_forward(TensorView out, TensorView inp) override;
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps) override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, eps);
  }
  void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                        TensorView rstd) override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, ws_);
  }
  void rope(TensorView x, int first_head, int heads, int head_dim, float theta, bool inverse) override {
    cpu::rope(x, first_head, heads, head_dim, theta, inverse);
  }
  void gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) override {
    cpu::gqa_expand(packed, fused, n_head, n_kv_head, head_dim);
  }
  void gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) override {
    cpu::gqa_reduce(dfused, dpacked, n_head, n_kv_head, head_dim);
  }
  void swiglu_forward(TensorView out, TensorView gate_up) override { cpu::swiglu_forward(out, gate_up); }
  void swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout) override {
    cpu::swiglu_backward(dgate_up, gate_up, dout);
  }
  void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) override;
  void residual_forward(TensorView out, TensorView a, TensorView b) override;
  double cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets,
                                        int vocab, float dloss) override;
  void cast(TensorView dst, TensorView src) override;
  double sum_squares(TensorView x) override;

 private:
  MemoryBudget budget_;
  Workspace ws_;
};

}  // namespace strata::cpu
