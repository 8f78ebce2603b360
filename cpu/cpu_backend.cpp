#include "cpu/cpu_backend.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu/ops.h"
#include "host/adam/adam.h"
#include "host/engine_ops.h"
#include "host/host_memory.h"

namespace strata::cpu {

bool opaque_device_requested() {
  const char* v = std::getenv("STRATA_OPAQUE_DEVICE");
  return v && std::strcmp(v, "1") == 0;
}

namespace {
// A view's host address: every op translates its operands first (a no-op for host memory).
TensorView h(TensorView v) {
  v.data = host_address(v.data);
  return v;
}
}  // namespace

CpuBackend::CpuBackend(CpuBackendOptions opts)
    : budget_("device", opts.device_mem_bytes),
      opaque_(opts.opaque),
      // The ops' scratch is the backend's own memory: charged to the budget, never tagged.
      ws_([this](size_t bytes, const std::string& tag) { return allocate_memory(bytes, tag, false); }) {
#ifdef _OPENMP
  if (opts.threads > 0) omp_set_num_threads(opts.threads);
#endif
}

Buffer CpuBackend::allocate(size_t bytes, const std::string& tag) { return allocate_memory(bytes, tag, opaque_); }

Buffer CpuBackend::allocate_memory(size_t bytes, const std::string& tag, bool tagged) {
  budget_.charge(bytes, "'" + tag + "'");
  // STRATA_TRACE_ALLOC=1 lists every device allocation (what fills a budget).
  static const bool trace = std::getenv("STRATA_TRACE_ALLOC") != nullptr;
  if (trace) std::fprintf(stderr, "strata: device allocation '%s' %zu bytes\n", tag.c_str(), bytes);
  void* p = nullptr;
  try {
    p = host::host_alloc(bytes, tag.c_str());
  } catch (...) {
    budget_.release(bytes);
    throw;
  }
  return Buffer(tagged ? tag_device(p) : p, bytes, Tier::device, tag, [this](void* ptr, size_t n) {
    host::host_free(host_address(ptr), n);
    budget_.release(n);
  });
}

void* CpuBackend::host_allocate(size_t bytes, bool pinned, const std::string& tag) {
  void* p = host::host_alloc(bytes, tag.c_str());
  if (pinned && p) {
    try {
      host::host_lock(p, bytes, tag.c_str());
    } catch (...) {
      host::host_free(p, bytes);
      throw;
    }
  }
  return p;
}

void CpuBackend::host_free(void* p, size_t bytes, bool pinned) {
  if (pinned && p) host::host_unlock(p, bytes);
  host::host_free(p, bytes);
}

std::unique_ptr<Stream> CpuBackend::make_stream(const std::string& name) { return std::make_unique<CpuStream>(name); }
std::unique_ptr<Event> CpuBackend::make_event() { return std::make_unique<CpuEvent>(); }

void CpuBackend::run(Stream& s, const DeviceOp& op) {
  if (&s == &compute_)
    op.run(op);
  else
    dynamic_cast<CpuStream&>(s).op(op);
}

void CpuBackend::copy_async(void* dst, const void* src, size_t bytes, Stream& s) {
  if (bytes == 0) return;
  if (&s == &compute_)
    std::memcpy(host_address(dst), host_address(src), bytes);
  else
    dynamic_cast<CpuStream&>(s).copy(host_address(dst), host_address(src), bytes);
}

// ---- engine ops: arguments travel by value in a DeviceOp, translated when they run ----

namespace {

// Zeroes n bytes, in parallel 1 MiB chunks where `parallel`. From 16 MiB (past the L2s) with
// non-temporal stores: a fill that large leaves the cache before it is read again, and a plain
// store reads each line before writing it. For a model's gradients (hundreds of MB) streamed
// chunks beat memsets per chunk, which beat one memset.
void zero_bytes(char* p, int64_t n, bool parallel) {
  constexpr int64_t kChunk = int64_t(1) << 20, kStreamFrom = int64_t(16) << 20;
  if (n < kStreamFrom) {
    std::memset(p, 0, size_t(n));
    return;
  }
  const int64_t head = int64_t((32 - (reinterpret_cast<uintptr_t>(p) & 31)) & 31);
  std::memset(p, 0, size_t(head));
  p += head, n -= head;
  const int64_t body = n & ~int64_t(31), chunks = (body + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t c = 0; c < chunks; ++c) {
    const __m256i zero = _mm256_setzero_si256();
    for (int64_t i = c * kChunk; i < std::min(body, (c + 1) * kChunk); i += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(p + i), zero);
    _mm_sfence();  // this thread's streamed stores, before the loop's barrier
  }
  std::memset(p + body, 0, size_t(n - body));
}

}  // namespace

void CpuBackend::fill_zero(void* dst, size_t bytes, Stream& s) {
  if (bytes == 0) return;
  DeviceOp op;
  // On the compute stream (the caller's thread) in parallel; on a worker stream serially.
  op.run = [](const DeviceOp& o) { zero_bytes(static_cast<char*>(host_address(o.p[0])), o.i[0], o.i[1] != 0); };
  op.p[0] = dst;
  op.i[0] = int64_t(bytes), op.i[1] = &s == &compute_;
  run(s, op);
}

void CpuBackend::convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate, Stream& s) {
  if (n <= 0) return;
  DeviceOp op;
  op.run = [](const DeviceOp& o) {
    host::convert_accumulate(host_address(o.p[0]), DType(o.i[1]), host_address(o.p[1]), DType(o.i[2]), o.i[0],
                             o.i[3] != 0);
  };
  op.p[0] = dst;
  op.p[1] = const_cast<void*>(src);
  op.i[0] = n, op.i[1] = int64_t(dst_t), op.i[2] = int64_t(src_t), op.i[3] = accumulate;
  run(s, op);
}

void CpuBackend::sum_squares(double* out, const void* x, DType t, int64_t n, bool accumulate, Stream& s) {
  DeviceOp op;
  // On the compute stream (the caller's thread) the chunks run in parallel; on a worker
  // stream serially. The chunks are fixed by n, so the result is the same either way.
  op.run = [](const DeviceOp& o) {
    double* acc = host_address(static_cast<double*>(o.p[0]));
    const double sq = host::sum_squares(host_address(o.p[1]), DType(o.i[1]), o.i[0], o.i[3] != 0);
    *acc = o.i[2] ? *acc + sq : sq;
  };
  op.p[0] = out;
  op.p[1] = const_cast<void*>(x);
  op.i[0] = n, op.i[1] = int64_t(t), op.i[2] = accumulate, op.i[3] = &s == &compute_;
  run(s, op);
}

void CpuBackend::adamw(const AdamWArgs& a, int32_t* nonfinite, Stream& s) {
  // The arguments outlive the call only on the compute stream (synchronous); elsewhere the
  // caller's AdamWArgs would have to stay alive, so device AdamW runs on the compute stream.
  STRATA_CHECK(&s == &compute_, "AdamW queued on stream '" + s.name() + "'",
               "this is a bug: the CPU backend runs the device AdamW on its compute stream");
  host::AdamTensors ts;
  ts.param = host_address(a.param);
  ts.m = host_address(a.m);
  ts.v = host_address(a.v);
  ts.m16 = host_address(a.m16);
  ts.v16 = host_address(a.v16);
  ts.param16 = host_address(a.param16);
  ts.stochastic = a.stochastic, ts.seed = a.seed, ts.index_base = a.index_base;
  ts.grad = host_address(a.grad);
  ts.grad_dtype = a.grad_dtype;
  ts.param_out = host_address(a.param_out);
  ts.out_dtype = a.out_dtype;
  ts.n = a.n;
  const host::AdamHyper hp{a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, true, a.bias_correction, a.t, a.grad_scale};
  const host::AdamOptions ko{host::AdamIsa(a.isa), a.threads, a.tile};
  if (host::adam_step(ts, hp, ko) && nonfinite) *host_address(nonfinite) = 1;
}

// ---- transformer ops (compute stream: the calling thread) ----

void CpuBackend::encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                                 std::span<const int32_t> positions) {
  cpu::encoder_forward(h(out), tokens, h(wte), h(wpe), positions);
}
void CpuBackend::encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens,
                                  std::span<const int32_t> positions) {
  cpu::encoder_backward(h(dwte), h(dwpe), h(dout), tokens, positions);
}
void CpuBackend::layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                                   TensorView bias) {
  cpu::layernorm_forward(h(out), h(mean), h(rstd), h(inp), h(weight), h(bias));
}
void CpuBackend::layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                    TensorView inp, TensorView weight, TensorView mean, TensorView rstd) {
  cpu::layernorm_backward(h(dinp), h(dweight), h(dbias), h(dout), h(inp), h(weight), h(mean), h(rstd), ws_);
}
void CpuBackend::matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  cpu::matmul_forward(h(out), h(inp), h(weight), h(bias), ws_);
}
void CpuBackend::matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                                     TensorView bias) {
  cpu::matmul_gelu_forward(h(out), h(pre), h(inp), h(weight), h(bias), ws_);
}
void CpuBackend::matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                                 TensorView weight) {
  cpu::matmul_backward(h(dinp), h(dweight), h(dbias), h(dout), h(inp), h(weight), ws_);
}
void CpuBackend::attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head, const DropoutSpec& drop,
                                   const AttentionSpec& spec, std::span<const int32_t> positions) {
  cpu::attention_forward(h(out), h(lse), h(qkv), n_head, ws_, drop, spec, positions);
}
void CpuBackend::attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                                    int n_head, const DropoutSpec& drop, const AttentionSpec& spec,
                                    std::span<const int32_t> positions) {
  cpu::attention_backward(h(dqkv), h(dout), h(qkv), h(out), h(lse), n_head, ws_, drop, spec, positions);
}
void CpuBackend::dropout(TensorView x, const DropoutSpec& drop) { cpu::dropout(h(x), drop); }
void CpuBackend::gelu_forward(TensorView out, TensorView inp) { cpu::gelu_forward(h(out), h(inp)); }
void CpuBackend::gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  cpu::gelu_backward(h(dinp), h(inp), h(dout));
}
void CpuBackend::residual_forward(TensorView out, TensorView a, TensorView b) {
  cpu::residual_forward(h(out), h(a), h(b));
}
void CpuBackend::scale(TensorView x, float alpha) { cpu::scale(h(x), alpha); }
void CpuBackend::add_columns(TensorView y, TensorView x, int64_t first, float alpha) {
  cpu::add_columns(h(y), h(x), first, alpha);
}
void CpuBackend::take_columns(TensorView x, TensorView y, int64_t first, float alpha) {
  cpu::take_columns(h(x), h(y), first, alpha);
}
void CpuBackend::rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                                 float weight_offset) {
  cpu::rmsnorm_forward(h(out), h(rstd), h(inp), h(weight), eps, weight_offset);
}
void CpuBackend::rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                                  TensorView weight, TensorView rstd, float weight_offset) {
  cpu::rmsnorm_backward(h(dinp), h(dweight), h(dout), h(inp), h(weight), h(rstd), ws_, weight_offset);
}
void CpuBackend::qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight, int n_head,
                                    int n_kv_head, int head_dim, float eps, const QkNormSpec& spec) {
  cpu::qk_rmsnorm_forward(h(out), h(rstd), h(inp), h(qk_weight), n_head, n_kv_head, head_dim, eps, spec);
}
void CpuBackend::qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp, TensorView qk_weight,
                                     TensorView rstd, int n_head, int n_kv_head, int head_dim, const QkNormSpec& spec) {
  cpu::qk_rmsnorm_backward(h(dfused), h(dqk_weight), h(inp), h(qk_weight), h(rstd), n_head, n_kv_head, head_dim, ws_,
                           spec);
}
void CpuBackend::rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& rope, bool inverse,
                      std::span<const int32_t> positions) {
  cpu::rope(h(x), first_head, heads, head_dim, rope, inverse, positions);
}
void CpuBackend::gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) {
  cpu::gqa_expand(h(packed), h(fused), n_head, n_kv_head, head_dim);
}
void CpuBackend::gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) {
  cpu::gqa_reduce(h(dfused), h(dpacked), n_head, n_kv_head, head_dim);
}
void CpuBackend::swiglu_forward(TensorView out, TensorView gate_up, GatedAct act) {
  cpu::swiglu_forward(h(out), h(gate_up), act);
}
void CpuBackend::swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout, GatedAct act) {
  cpu::swiglu_backward(h(dgate_up), h(gate_up), h(dout), act);
}
void CpuBackend::cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets,
                                                int vocab, float dloss, double* loss_sum, double loss_divisor,
                                                double loss_weight, float softcap) {
  const double total = cpu::cross_entropy_forward_backward(h(losses), h(logits), targets, vocab, dloss, softcap);
  if (loss_sum) *host_address(loss_sum) += total / loss_divisor * loss_weight;
}
void CpuBackend::cast(TensorView dst, TensorView src) { cpu::cast(h(dst), h(src)); }

}  // namespace strata::cpu
