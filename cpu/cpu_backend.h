// The CPU backend: a real device with a memory budget, worker-thread streams, and the
// transformer ops on oneDNN (matmuls) and OpenMP (everything else).
#pragma once
#include <memory>

#include "backend/backend.h"
#include "cpu/cpu_stream.h"
#include "cpu/device_address.h"
#include "cpu/ops.h"
#include "cpu/workspace.h"

namespace strata::cpu {

struct CpuBackendOptions {
  size_t device_mem_bytes = size_t(8) << 30;  // the "device" budget
  int threads = 0;                            // OpenMP threads for ops; 0 = all available
  // Device memory not addressable by host code (see cpu/device_address.h); default from
  // STRATA_OPAQUE_DEVICE=1.
  bool opaque = opaque_device_requested();
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions opts);
  std::string name() const override { return opaque_ ? "cpu (opaque device memory)" : "cpu"; }

  Buffer allocate(size_t bytes, const std::string& tag) override;
  MemoryBudget& budget() override { return budget_; }
  void* host_allocate(size_t bytes, bool pinned, const std::string& tag) override;
  void host_free(void* p, size_t bytes, bool pinned) override;

  std::unique_ptr<Stream> make_stream(const std::string& name) override;
  std::unique_ptr<Event> make_event() override;
  void copy_async(void* dst, const void* src, size_t bytes, Stream& s) override;
  Stream& compute_stream() override { return compute_; }
  void* transport_address(const void* p) const override { return host_address(const_cast<void*>(p)); }
  bool opaque() const { return opaque_; }

  void fill_zero(void* dst, size_t bytes, Stream& s) override;
  void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate, Stream& s) override;
  void sum_squares(double* out, const void* x, DType t, int64_t n, bool accumulate, Stream& s) override;
  void adamw(const AdamWArgs& a, int32_t* nonfinite, Stream& s) override;

  void encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                       std::span<const int32_t> positions = {}) override;
  void encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens,
                        std::span<const int32_t> positions = {}) override;
  void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                         TensorView bias) override;
  void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                          TensorView weight, TensorView mean, TensorView rstd) override;
  void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) override;
  void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight, TensorView bias) override;
  void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                       TensorView weight) override;
  void attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head, const DropoutSpec& drop = {},
                         const AttentionSpec& spec = {}, std::span<const int32_t> positions = {}) override;
  void dropout(TensorView x, const DropoutSpec& drop) override;
  void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse, int n_head,
                          const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                          std::span<const int32_t> positions = {}) override;
  void gelu_forward(TensorView out, TensorView inp) override;
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                       float weight_offset = 0.0f) override;
  void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                        TensorView rstd, float weight_offset = 0.0f) override;
  void qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight, int n_head,
                          int n_kv_head, int head_dim, float eps, const QkNormSpec& spec = {}) override;
  void qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp, TensorView qk_weight,
                           TensorView rstd, int n_head, int n_kv_head, int head_dim,
                           const QkNormSpec& spec = {}) override;
  void rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& rope, bool inverse,
            std::span<const int32_t> positions = {}) override;
  void gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) override;
  void gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) override;
  void swiglu_forward(TensorView out, TensorView gate_up, GatedAct act = GatedAct::silu) override;
  void swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout,
                       GatedAct act = GatedAct::silu) override;
  void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) override;
  void residual_forward(TensorView out, TensorView a, TensorView b) override;
  void scale(TensorView x, float alpha) override;
  void add_columns(TensorView y, TensorView x, int64_t first, float alpha) override;
  void take_columns(TensorView x, TensorView y, int64_t first, float alpha) override;
  void cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets, int vocab,
                                      float dloss, double* loss_sum, double loss_divisor, double loss_weight,
                                      float softcap = 0.0f) override;
  void cast(TensorView dst, TensorView src) override;

 private:
  // Runs op now (the compute stream) or queues it on s, a CpuStream.
  void run(Stream& s, const DeviceOp& op);
  Buffer allocate_memory(size_t bytes, const std::string& tag, bool tagged);
  MemoryBudget budget_;
  bool opaque_;
  InlineStream compute_;
  Workspace ws_;
};

}  // namespace strata::cpu
