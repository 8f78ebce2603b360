// The device abstraction. A Backend owns a budgeted memory tier, ordered asynchronous
// streams with events, copies between tiers, and the ops a transformer needs.
//
// Op contract (llm.c order): outputs first, then inputs, then sizes. Activations and their
// gradients are f32 or bf16 (the compute dtype); parameter gradients, layernorm
// statistics, attention log-sum-exps and logits are always f32. The transformer ops run on
// the backend's compute stream (compute_stream()); the engine ops and copies run on the
// stream they are given.
//
// Device memory belongs to the backend, so host code runs unchanged on a device whose memory
// the host cannot address (a GPU's): a Buffer from allocate() holds a device address that
// only the backend's ops and copies may dereference. Host code moves bytes in and out with
// copy_async (or the synchronous upload/download outside the step), and host callbacks
// (Stream::launch_host) touch host memory only. The CPU backend's opaque mode
// (STRATA_OPAQUE_DEVICE=1) makes any other access fault, which proves it in tests.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "backend/buffer.h"
#include "backend/memory_budget.h"
#include "backend/op_specs.h"
#include "core/tensor.h"

namespace strata {

class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;  // blocks until the recorded work is done; rethrows its error
  virtual bool ready() const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual void record(Event& e) = 0;  // e completes when all work enqueued so far is done
  virtual void wait(Event& e) = 0;    // later work on this stream starts after e completes
  virtual void synchronize() = 0;     // blocks until the stream is drained; rethrows errors
  // Runs fn on the stream, in order with the rest of its work (CPU: its worker thread).
  // Keep captures small (a pointer and an index) so no allocation happens per call.
  virtual void launch_host(std::function<void()> fn) = 0;
  // Seconds this stream has spent running work so far (not waiting on events): an
  // engine's busy time for the step timeline.
  virtual double busy_seconds() const = 0;
  virtual const std::string& name() const = 0;
  // The device API's own stream (CUDA: the cudaStream_t), for a transport that launches on
  // it (NCCL); nullptr where streams are the backend's own threads (CPU).
  virtual void* native_handle() const { return nullptr; }
};

// The device-side AdamW of one parameter range (the engine's device shard): master, m and v
// updated in place from grads (f32/bf16/f16, times grad_scale); param_out, when set,
// receives the updated parameters in out_dtype in the same pass.
struct AdamWArgs {
  float* param = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const void* grad = nullptr;
  DType grad_dtype = DType::f32;
  void* param_out = nullptr;
  DType out_dtype = DType::f32;
  int64_t n = 0;
  float lr = 0, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0, grad_scale = 1;
  int64_t t = 1;                // the update, from 1 (bias correction)
  bool bias_correction = true;  // divide m and v by 1-β^t
  // Kernel hints a CPU backend honours (host::AdamOptions: ISA, threads, tile); others ignore them.
  int isa = 0, threads = 0;
  int64_t tile = int64_t(1) << 16;
  // 16-bit states: m and v in bf16 (m16, v16 instead of m, v) and the master in bf16 (param16
  // instead of param: the bf16 compute copy itself), each rounded once per update
  // stochastically from (seed, t, index_base + i) — index_base: the model-flat index of
  // element 0 — or to nearest (kernels/math/adam16_math.h).
  uint16_t* m16 = nullptr;
  uint16_t* v16 = nullptr;
  uint16_t* param16 = nullptr;
  bool stochastic = true;
  uint64_t seed = 0;
  int64_t index_base = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory: every byte is charged to the budget ----
  virtual Buffer allocate(size_t bytes, const std::string& tag) = 0;
  virtual MemoryBudget& budget() = 0;

  // Host memory for the host tier and staging buffers (CUDA: cudaHostAlloc, so DMA can
  // reach it; CPU: mmap'd and, when `pinned`, page-locked with mlock). Not charged to the
  // device budget: the tier manager charges the host budget. A failure to page-lock is an
  // Error saying what limit to raise.
  virtual void* host_allocate(size_t bytes, bool pinned, const std::string& tag) = 0;
  virtual void host_free(void* p, size_t bytes, bool pinned) = 0;

  // ---- streams, events and copies ----
  virtual std::unique_ptr<Stream> make_stream(const std::string& name) = 0;
  virtual std::unique_ptr<Event> make_event() = 0;
  // Host↔device and device↔device; either side may be host or device memory.
  virtual void copy_async(void* dst, const void* src, size_t bytes, Stream& s) = 0;
  // The stream the transformer ops run on (CPU: the calling thread, synchronously).
  virtual Stream& compute_stream() = 0;
  // Synchronous copies on the compute stream, for setup, checkpoints and export (never in
  // the step: they wait for the device).
  void upload(void* device_dst, const void* host_src, size_t bytes);
  void download(void* host_dst, const void* device_src, size_t bytes);
  // The address a transport that runs on the host (MPI on the CPU backend) must be handed
  // for device memory; a backend whose device memory is not host memory returns p unchanged
  // and its communicator (NCCL) takes device addresses itself.
  virtual void* transport_address(const void* p) const = 0;

  // ---- engine ops: device memory, on stream s (packing, accumulation, norms, AdamW) ----
  virtual void fill_zero(void* dst, size_t bytes, Stream& s) = 0;
  // dst[0, n) = src converted to dst_t (round to nearest even); with `accumulate`,
  // dst = round(dst + src) (src must then be f32: bucket output into a gradient shard).
  virtual void convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate, Stream& s) = 0;
  // *out (+)= Σ x² of n elements (f32/bf16/f16) in f64, in an order that depends only on n;
  // out is a device f64 scalar, read back once per step.
  virtual void sum_squares(double* out, const void* x, DType t, int64_t n, bool accumulate, Stream& s) = 0;
  // One AdamW update (see AdamWArgs); *nonfinite (a device i32) is set to 1 when a gradient
  // was not finite, left alone otherwise.
  virtual void adamw(const AdamWArgs& a, int32_t* nonfinite, Stream& s) = 0;

  // ---- ops ----
  // Packed rows. The ops that depend on where a token sits (the position embedding, RoPE,
  // attention) take `positions` [B,T] on the host: a row holds several records, and a
  // record's positions count 0, 1, … from its first row (positions[b,t] is 0 or
  // positions[b,t-1] + 1; kernels/math/segment_math.h). Attention stays inside each record.
  // Empty: one record per row, position t. Checked (check_positions) before use.
  //
  // out[B,T,C] = wte[tokens] + wpe[position]
  virtual void encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                               std::span<const int32_t> positions = {}) = 0;
  // dwte[tok] += dout[b,t]; dwpe[position] += dout[b,t]  (dwte, dwpe f32)
  virtual void encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens,
                                std::span<const int32_t> positions = {}) = 0;
  // out[N,C] = (inp - mean) * rstd * weight + bias; mean, rstd f32 [N]
  virtual void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                                 TensorView bias) = 0;
  // dinp += ...; dweight, dbias (f32) += ...
  virtual void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                  TensorView inp, TensorView weight, TensorView mean, TensorView rstd) = 0;
  // out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]  (bias may be empty; out may be f32 logits)
  virtual void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) = 0;
  // pre = inp · weight^T + bias and out = gelu(pre) (GPT-2's MLP up-projection, both kept for
  // the backward). By default the two ops; the CUDA backend fuses them in cuBLASLt's epilogue.
  virtual void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight, TensorView bias);
  // dinp[N,C] = dout · weight (overwritten); dweight += dout^T · inp; dbias += Σ_n dout (f32).
  // An empty dweight: the weight is frozen (LoRA's base), and only dinp (and dbias) are made.
  virtual void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                               TensorView weight) = 0;
  // Causal multi-head attention. qkv[B,T,3C] -> out[B,T,C]; lse f32 [B,NH,T] saved for backward.
  // With an active `drop`, each probability P_ij is multiplied by its dropout factor
  // (kernels/math/dropout_math.h, index (row, head, i, j)) after the softmax; lse stays the
  // undropped softmax's. `spec` may set a sliding window (query i sees only keys
  // i - window < j ≤ i), another score scale, and a soft-cap of the scores (AttentionSpec).
  // With `positions`, query i sees only the keys of its own record, i - positions[i] ≤ j.
  virtual void attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head,
                                 const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                                 std::span<const int32_t> positions = {}) = 0;
  // dqkv[B,T,3C] (overwritten) from dout, recomputing probabilities one head at a time (and
  // the forward's dropout masks, from the same `drop`; the same `spec` and `positions`).
  virtual void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                                  int n_head, const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                                  std::span<const int32_t> positions = {}) = 0;
  // x[B,T,W] in place times each element's dropout factor (0 or 1/(1-p), dropout_math.h):
  // the forward on an activation, and with the same spec the backward on its gradient.
  virtual void dropout(TensorView x, const DropoutSpec& drop) = 0;
  // tanh-approximated GELU (GPT-2)
  virtual void gelu_forward(TensorView out, TensorView inp) = 0;
  // dinp = gelu'(inp) * dout  (dinp may alias dout)
  virtual void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) = 0;
  // out = a + b
  virtual void residual_forward(TensorView out, TensorView a, TensorView b) = 0;
  // x *= alpha in place (Gemma's embedding scale, and its gradient)
  virtual void scale(TensorView x, float alpha) = 0;
  // A block of columns of a wider activation (LoRA on one part of a fused projection: q of
  // q|k|v, gate of gate|up): y [N, W] gets alpha·x [N, w] added to its columns
  // [first, first + w) (kernels/math/element_math.h's scaled_add), and take_columns writes
  // x = alpha·y[:, first : first + w]. x and y of one activation dtype.
  virtual void add_columns(TensorView y, TensorView x, int64_t first, float alpha) = 0;
  virtual void take_columns(TensorView x, TensorView y, int64_t first, float alpha) = 0;
  // Fused softmax cross-entropy over the first `vocab` of the (padded) last dimension; with
  // softcap > 0 of the capped logits softcap·tanh(x/softcap) (Gemma-2), the gradient to x.
  // logits f32 [N,Vp] are overwritten with dloss * (softmax - onehot); padded columns get 0.
  // targets < 0 are ignored (loss 0, gradient 0). losses f32 [N]. Adds
  // Σ losses / loss_divisor · loss_weight to *loss_sum, a device f64 scalar read back once
  // per step (the trainer's weighted mean over micro-batches and ranks).
  virtual void cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets,
                                              int vocab, float dloss, double* loss_sum, double loss_divisor,
                                              double loss_weight, float softcap = 0.0f) = 0;
  // ---- Llama-family ops ----
  // out[N,C] = inp · rstd · (weight + weight_offset), rstd = (mean inp² + eps)^-1/2 saved f32
  // [N] (Gemma's norms scale by 1 + w: weight_offset 1)
  virtual void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                               float weight_offset = 0.0f) = 0;
  // dinp += ...; dweight (f32) += ...
  virtual void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                                TensorView rstd, float weight_offset = 0.0f) = 0;
  // The q/k RMSNorm on fused q|k|v rows [N, (NH+2·NKV)·d]: out = inp with the q and k heads
  // normalised, per head (Qwen3: each q head by qk_weight[0:d], each k head by qk_weight[d:2d])
  // or whole (OLMo-2: the q heads as one vector by qk_weight[0:NH·d], the k heads by the rest),
  // as `spec` says (kernels/math/qk_norm_math.h); v copied; rstd f32 [N, groups].
  virtual void qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight, int n_head,
                                  int n_kv_head, int head_dim, float eps, const QkNormSpec& spec = {}) = 0;
  // In place on dfused [N, (NH+2·NKV)·d]: the q and k heads' gradients taken back through the
  // norm (= dinp, not +=; the v heads untouched); dqk_weight (f32) += its gradient.
  virtual void qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp, TensorView qk_weight,
                                   TensorView rstd, int n_head, int n_kv_head, int head_dim,
                                   const QkNormSpec& spec = {}) = 0;
  // Rotary embeddings in place on heads [first, first+heads) (width head_dim) of x[B,T,W]:
  // (x_i, x_{i+d/2}) rotated by t·inv_freq_i (kernels/math/rope_math.h: theta^(-2i/d), then
  // rope_scaling; t is the token's position); inverse rotates back (the backward).
  virtual void rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& rope, bool inverse,
                    std::span<const int32_t> positions = {}) = 0;
  // Grouped-query attention around the fused MHA op: fused q|k|v [N,(NH+2·NKV)·d] <-> packed
  // [N,3·NH·d] (kv head j serves query heads j·g..), and the reduction of the gradients back.
  virtual void gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) = 0;
  virtual void gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) = 0;
  // out[N,I] = silu(gate) · up with gate_up[N,2I] = gate | up; and its backward into dgate_up
  // (act gelu_tanh: GeGLU, out = gelu(gate) · up, Gemma's MLP)
  virtual void swiglu_forward(TensorView out, TensorView gate_up, GatedAct act = GatedAct::silu) = 0;
  virtual void swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout,
                               GatedAct act = GatedAct::silu) = 0;
  // dst = src converted to dst's dtype (same element count)
  virtual void cast(TensorView dst, TensorView src) = 0;
};

}  // namespace strata
