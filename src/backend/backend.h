// The device abstraction. A Backend owns a budgeted memory tier, ordered asynchronous
// streams with events, copies between tiers, and the ops a transformer needs.
//
// Op contract (llm.c order): outputs first, then inputs, then sizes. Activations and their
// gradients are f32 or bf16 (the compute dtype); parameter gradients, layernorm
// statistics, attention log-sum-exps and logits are always f32. Ops run on the calling
// thread's compute stream; copies run on the stream they are given.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "backend/buffer.h"
#include "backend/memory_budget.h"
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
  virtual void copy_async(void* dst, const void* src, size_t bytes, Stream& s) = 0;

  // ---- ops ----
  // out[B,T,C] = wte[tokens] + wpe[t]
  virtual void encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe) = 0;
  // dwte[tok] += dout[b,t]; dwpe[t] += dout[b,t]  (dwte, dwpe f32)
  virtual void encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens) = 0;
  // out[N,C] = (inp - mean) * rstd * weight + bias; mean, rstd f32 [N]
  virtual void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                                 TensorView bias) = 0;
  // dinp += ...; dweight, dbias (f32) += ...
  virtual void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                  TensorView inp, TensorView weight, TensorView mean, TensorView rstd) = 0;
  // out[N,OC] = inp[N,C] · weight[OC,C]^T + bias[OC]  (bias may be empty; out may be f32 logits)
  virtual void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) = 0;
  // dinp[N,C] = dout · weight (overwritten); dweight += dout^T · inp; dbias += Σ_n dout (f32)
  virtual void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                               TensorView weight) = 0;
  // Causal multi-head attention. qkv[B,T,3C] -> out[B,T,C]; lse f32 [B,NH,T] saved for backward.
  virtual void attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head) = 0;
  // dqkv[B,T,3C] (overwritten) from dout, recomputing probabilities one head at a time.
  virtual void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                                  int n_head) = 0;
  // tanh-approximated GELU (GPT-2)
  virtual void gelu_forward(TensorView out, TensorView inp) = 0;
  // dinp = gelu'(inp) * dout  (dinp may alias dout)
  virtual void gelu_backward(TensorView dinp, TensorView inp, TensorView dout) = 0;
  // out = a + b
  virtual void residual_forward(TensorView out, TensorView a, TensorView b) = 0;
  // Fused softmax cross-entropy over the first `vocab` of the (padded) last dimension.
  // logits f32 [N,Vp] are overwritten with dloss * (softmax - onehot); padded columns get 0.
  // targets < 0 are ignored (loss 0, gradient 0). losses f32 [N]. Returns Σ losses.
  virtual double cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets,
                                                int vocab, float dloss) = 0;
  // ---- Llama-family ops ----
  // out[N,C] = inp · rstd · weight, rstd = (mean inp² + eps)^-1/2 saved f32 [N]
  virtual void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps) = 0;
  // dinp += ...; dweight (f32) += ...
  virtual void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                                TensorView rstd) = 0;
  // Rotary embeddings in place on heads [first, first+heads) (width head_dim) of x[B,T,W]:
  // (x_i, x_{i+d/2}) rotated by t·theta^(-2i/d); inverse rotates back (the backward).
  virtual void rope(TensorView x, int first_head, int heads, int head_dim, float theta, bool inverse) = 0;
  // Grouped-query attention around the fused MHA op: fused q|k|v [N,(NH+2·NKV)·d] <-> packed
  // [N,3·NH·d] (kv head j serves query heads j·g..), and the reduction of the gradients back.
  virtual void gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) = 0;
  virtual void gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) = 0;
  // out[N,I] = silu(gate) · up with gate_up[N,2I] = gate | up; and its backward into dgate_up
  virtual void swiglu_forward(TensorView out, TensorView gate_up) = 0;
  virtual void swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout) = 0;
  // dst = src converted to dst's dtype (same element count)
  virtual void cast(TensorView dst, TensorView src) = 0;
  // Σ x² over an f32, bf16 or f16 tensor, accumulated in f64 in an order that depends only
  // on the element count (global-norm clipping; deterministic for any thread count)
  virtual double sum_squares(TensorView x) = 0;
};

}  // namespace strata
