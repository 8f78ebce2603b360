// The CUDA backend: one GPU per process (rank), its memory taken once at start-up and
// carved by an ArenaAllocator (no cudaMalloc in a step), pinned host memory from
// cudaHostAlloc, streams and events one to one with CUDA's, matmuls on cuBLASLt and every
// other op a kernel of kernels/*.cu with the CPU backend's contract (src/backend/backend.h).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/arena_allocator.h"
#include "backend/backend.h"
#include "kernels/cuda_stream.h"
#include "kernels/math/attention_math.h"
#include "kernels/math/scratch_sizes.h"

namespace strata::cuda {

class Gemm;

struct CudaBackendOptions {
  size_t device_mem_bytes = size_t(8) << 30;  // the budget (capped by what the GPU has free)
  int device = 0;                             // CUDA device ordinal (a rank's local rank)
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(CudaBackendOptions opts);
  ~CudaBackend() override;
  std::string name() const override { return "cuda:" + std::to_string(device_); }
  int device() const { return device_; }

  Buffer allocate(size_t bytes, const std::string& tag) override;
  MemoryBudget& budget() override { return *budget_; }
  void* host_allocate(size_t bytes, bool pinned, const std::string& tag) override;
  void host_free(void* p, size_t bytes, bool pinned) override;

  std::unique_ptr<Stream> make_stream(const std::string& name) override;
  std::unique_ptr<Event> make_event() override;
  void copy_async(void* dst, const void* src, size_t bytes, Stream& s) override;
  Stream& compute_stream() override { return *compute_; }
  void* transport_address(const void* p) const override { return const_cast<void*>(p); }

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
  void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse, int n_head,
                          const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                          std::span<const int32_t> positions = {}) override;
  void dropout(TensorView x, const DropoutSpec& drop) override;
  void gelu_forward(TensorView out, TensorView inp) override;
  void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) override;
  void residual_forward(TensorView out, TensorView a, TensorView b) override;
  void scale(TensorView x, float alpha) override;
  void add_columns(TensorView y, TensorView x, int64_t first, float alpha) override;
  void take_columns(TensorView x, TensorView y, int64_t first, float alpha) override;
  void cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets, int vocab,
                                      float dloss, double* loss_sum, double loss_divisor, double loss_weight,
                                      float softcap = 0.0f) override;
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
  void cast(TensorView dst, TensorView src) override;

 private:
  void* cs() const { return compute_->native_handle(); }
  // The compute stream's op scratch, grown (after draining the stream) only when an op
  // needs more than any op before it: the first step, never the steady state.
  void* scratch(size_t bytes);
  // Token ids to the device through a pinned ring (checked against `limit` on the host first).
  const int32_t* stage_tokens(std::span<const int32_t> ids, int64_t limit, const char* what);
  // Packed rows' positions and record ends to the device (checked first); kept while the
  // same positions come back, as they do for every op of a micro-batch. Empty: none.
  kernel_math::AttnRecords stage_records(std::span<const int32_t> positions, int64_t B, int64_t T, const char* op);
  const float* rope_table(int64_t T, int head_dim, const RopeSpec& rope);
  void* square_scratch(Stream& s);

  int device_;
  void* slab_ = nullptr;  // the one cudaMalloc
  std::unique_ptr<ArenaAllocator> arena_;
  std::unique_ptr<MemoryBudget> budget_;
  std::unique_ptr<CudaStream> compute_;
  Buffer gemm_workspace_;
  std::unique_ptr<Gemm> gemm_;
  Buffer scratch_;
  struct TokenSlot {
    int32_t* host = nullptr;  // pinned
    Buffer device;
    size_t capacity = 0;  // ids
    std::unique_ptr<CudaEvent> copied;
  };
  TokenSlot token_slots_[kernel_math::kTokenSlots];
  int next_token_slot_ = 0;
  // positions | record ends, pinned and on the device (stage_records)
  TokenSlot records_;
  size_t records_staged_ = 0;  // positions in records_ now (0: none)
  struct RopeTable {
    int64_t T;
    int head_dim;
    RopeSpec rope;
    Buffer table;
  };
  std::vector<RopeTable> rope_tables_;
  std::vector<std::pair<const Stream*, Buffer>> square_scratch_;
};

}  // namespace strata::cuda
