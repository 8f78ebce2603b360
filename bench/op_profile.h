// Where a training step's time goes, by op: a Backend that forwards every call to another
// and times it (`strata bench model --profile`). The CPU backend runs its ops on the calling
// thread, so a call's wall time is the op's; on a backend with asynchronous streams it would
// be the launch's only, and the profile is refused there.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace strata::bench {

class ProfilingBackend final : public Backend {
 public:
  enum Op : int {
    fill_zero_op,
    convert_op,
    sum_squares_op,
    adamw_op,
    encoder_fwd,
    encoder_bwd,
    layernorm_fwd,
    layernorm_bwd,
    matmul_fwd,
    matmul_gelu_fwd,
    matmul_bwd,
    attention_fwd,
    attention_bwd,
    dropout_op,
    gelu_fwd,
    gelu_bwd,
    residual_fwd,
    scale_op,
    add_columns_op,
    take_columns_op,
    cross_entropy,
    rmsnorm_fwd,
    rmsnorm_bwd,
    qk_rmsnorm_fwd,
    qk_rmsnorm_bwd,
    rope_op,
    gqa_expand_op,
    gqa_reduce_op,
    swiglu_fwd,
    swiglu_bwd,
    cast_op,
    copy_op,
    kOps
  };
  struct Entry {
    int64_t calls = 0;
    double seconds = 0;
    double flops = 0;  // the matmuls' multiply-adds × 2
  };

  explicit ProfilingBackend(Backend& inner) : in_(inner) {}
  void reset() { entries_ = {}; }
  const std::array<Entry, kOps>& entries() const { return entries_; }
  static const char* op_name(int op);

  std::string name() const override { return in_.name() + " (profiled)"; }
  Buffer allocate(size_t bytes, const std::string& tag) override { return in_.allocate(bytes, tag); }
  MemoryBudget& budget() override { return in_.budget(); }
  void* host_allocate(size_t bytes, bool pinned, const std::string& tag) override {
    return in_.host_allocate(bytes, pinned, tag);
  }
  void host_free(void* p, size_t bytes, bool pinned) override { in_.host_free(p, bytes, pinned); }
  std::unique_ptr<Stream> make_stream(const std::string& n) override { return in_.make_stream(n); }
  std::unique_ptr<Event> make_event() override { return in_.make_event(); }
  void copy_async(void* dst, const void* src, size_t bytes, Stream& s) override;
  Stream& compute_stream() override { return in_.compute_stream(); }
  void* transport_address(const void* p) const override { return in_.transport_address(p); }

  void fill_zero(void* dst, size_t bytes, Stream& s) override;
  void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate, Stream& s) override;
  void sum_squares(double* out, const void* x, DType t, int64_t n, bool accumulate, Stream& s) override;
  void adamw(const AdamWArgs& a, int32_t* nonfinite, Stream& s) override;
  void encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                       std::span<const int32_t> positions) override;
  void encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens,
                        std::span<const int32_t> positions) override;
  void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                         TensorView bias) override;
  void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                          TensorView weight, TensorView mean, TensorView rstd) override;
  void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) override;
  void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight, TensorView bias) override;
  void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                       TensorView weight) override;
  void attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head, const DropoutSpec& drop,
                         const AttentionSpec& spec, std::span<const int32_t> positions) override;
  void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse, int n_head,
                          const DropoutSpec& drop, const AttentionSpec& spec,
                          std::span<const int32_t> positions) override;
  void dropout(TensorView x, const DropoutSpec& drop) override;
  void gelu_forward(TensorView out, TensorView inp) override;
  void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) override;
  void residual_forward(TensorView out, TensorView a, TensorView b) override;
  void scale(TensorView x, float alpha) override;
  void add_columns(TensorView y, TensorView x, int64_t first, float alpha) override;
  void take_columns(TensorView x, TensorView y, int64_t first, float alpha) override;
  void cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets, int vocab,
                                      float dloss, double* loss_sum, double loss_divisor, double loss_weight,
                                      float softcap) override;
  void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                       float weight_offset) override;
  void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                        TensorView rstd, float weight_offset) override;
  void qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight, int n_head,
                          int n_kv_head, int head_dim, float eps, const QkNormSpec& spec) override;
  void qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp, TensorView qk_weight,
                           TensorView rstd, int n_head, int n_kv_head, int head_dim, const QkNormSpec& spec) override;
  void rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& rope, bool inverse,
            std::span<const int32_t> positions) override;
  void gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) override;
  void gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) override;
  void swiglu_forward(TensorView out, TensorView gate_up, GatedAct act) override;
  void swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout, GatedAct act) override;
  void cast(TensorView dst, TensorView src) override;

 private:
  template <class F>
  void timed(Op op, double flops, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    Entry& e = entries_[op];
    e.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    e.calls += 1, e.flops += flops;
  }
  Backend& in_;
  std::array<Entry, kOps> entries_{};
};

}  // namespace strata::bench
