// The CUDA backend's memory, streams, copies and engine ops; the transformer ops are in
// cuda_backend_ops.cpp.
#include "kernels/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/op_checks.h"
#include "core/error.h"
#include "host/host_memory.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_gemm.h"
#include "kernels/launch.h"
#include "kernels/math/adam16_math.h"
#include "kernels/math/element_math.h"
#include "kernels/math/segment_math.h"

namespace strata::cuda {

namespace {
constexpr size_t kGemmWorkspace = kernel_math::kGemmWorkspaceBytes;
constexpr size_t kContextReserve = size_t(1) << 30;  // left free for the context, cuBLAS and NCCL
}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions opts) {
  int count = 0;
  STRATA_CUDA_CHECK(cudaGetDeviceCount(&count));
  STRATA_CHECK(count > 0, "--device cuda: no GPU is visible", "use --device cpu");
  device_ = opts.device % count;
  STRATA_CUDA_CHECK(cudaSetDevice(device_));
  size_t free_bytes = 0, total = 0;
  STRATA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  const size_t usable = free_bytes > kContextReserve ? free_bytes - kContextReserve : 0;
  const size_t bytes = std::min(opts.device_mem_bytes, usable);
  STRATA_CHECK(bytes >= kGemmWorkspace * 2,
               "GPU " + std::to_string(device_) + " has " + std::to_string(free_bytes >> 20) + " MiB free",
               "free the GPU (nvidia-smi shows what holds it) or run on another");
  STRATA_CUDA_CHECK(cudaMalloc(&slab_, bytes));
  arena_ = std::make_unique<ArenaAllocator>(bytes, 256);
  budget_ = std::make_unique<MemoryBudget>("device", arena_->capacity(), "--device-mem");
  compute_ = std::make_unique<CudaStream>("compute");
  gemm_workspace_ = allocate(kGemmWorkspace, "cublaslt:workspace");
  gemm_ = std::make_unique<Gemm>(gemm_workspace_.data(), kGemmWorkspace);
  for (TokenSlot& t : token_slots_) t.copied = std::make_unique<CudaEvent>();
  records_.copied = std::make_unique<CudaEvent>();
}

CudaBackend::~CudaBackend() {
  if (compute_) cudaStreamSynchronize(static_cast<cudaStream_t>(cs()));
  for (TokenSlot& t : token_slots_)
    if (t.host) cudaFreeHost(t.host);
  if (records_.host) cudaFreeHost(records_.host);
  // Buffers carved from the slab return to the arena before it goes.
  for (TokenSlot& t : token_slots_) t.device = {};
  records_.device = {};
  rope_tables_.clear(), square_scratch_.clear(), scratch_ = {};
  gemm_.reset();
  gemm_workspace_ = {};
  compute_.reset();
  if (slab_) cudaFree(slab_);
}

Buffer CudaBackend::allocate(size_t bytes, const std::string& tag) {
  budget_->charge(bytes, "'" + tag + "'");
  static const bool trace = std::getenv("STRATA_TRACE_ALLOC") != nullptr;
  if (trace) std::fprintf(stderr, "strata: device allocation '%s' %zu bytes\n", tag.c_str(), bytes);
  const size_t off = arena_->allocate(bytes);
  if (off == ArenaAllocator::kNone) {
    budget_->release(bytes);
    throw_error("device memory for '" + tag + "' (" + std::to_string(bytes) + " bytes): the budget has room but no " +
                    "free range is that large (largest " + std::to_string(arena_->largest_free()) + " bytes)",
                "raise --device-mem, or lower --micro-batch or the bucket sizes");
  }
  return Buffer(static_cast<char*>(slab_) + off, bytes, Tier::device, tag, [this, off](void*, size_t n) {
    arena_->free(off, n);
    budget_->release(n);
  });
}

void* CudaBackend::host_allocate(size_t bytes, bool pinned, const std::string& tag) {
  void* p = nullptr;
  if (pinned) {
    // Portable: DMA-reachable from every context, so NCCL and copies on any stream may use it.
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    STRATA_CHECK(e == cudaSuccess,
                 "pinned host memory for '" + tag + "' (" + std::to_string(bytes) + " bytes): " + cudaGetErrorString(e),
                 "lower --host-mem or --pin-buffer-count; check the memlock limit (ulimit -l)");
    return p;
  }
  return host::host_alloc(bytes, tag.c_str());  // mmap'd, huge-page advised, first-touched in parallel
}

void CudaBackend::host_free(void* p, size_t bytes, bool pinned) {
  if (!p) return;
  if (pinned)
    STRATA_CUDA_CHECK(cudaFreeHost(p));
  else
    host::host_free(p, bytes);
}

std::unique_ptr<Stream> CudaBackend::make_stream(const std::string& name) { return std::make_unique<CudaStream>(name); }
std::unique_ptr<Event> CudaBackend::make_event() { return std::make_unique<CudaEvent>(); }

void CudaBackend::copy_async(void* dst, const void* src, size_t bytes, Stream& s) {
  if (bytes == 0) return;
  // cudaMemcpyDefault: unified addressing tells device from (pinned or pageable) host memory.
  STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(s.native_handle())));
}

void* CudaBackend::scratch(size_t bytes) {
  if (bytes > scratch_.bytes()) {
    const size_t grown = std::max(bytes, scratch_.bytes() * 2);  // few regrowths in the first step
    compute_->synchronize();                                     // kernels still reading the old scratch finish first
    scratch_ = {};
    scratch_ = allocate(grown, "cuda:op-scratch");
  }
  return scratch_.data();
}

void* CudaBackend::square_scratch(Stream& s) {
  for (auto& [stream, buf] : square_scratch_)
    if (stream == &s) return buf.data();
  square_scratch_.emplace_back(&s, allocate(launch::square_sum_scratch_bytes(), "cuda:square-sum-scratch"));
  return square_scratch_.back().second.data();
}

void CudaBackend::fill_zero(void* dst, size_t bytes, Stream& s) {
  if (bytes) STRATA_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(s.native_handle())));
}

void CudaBackend::convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate, Stream& s) {
  if (n <= 0) return;
  if (accumulate) {
    STRATA_CHECK(src_t == DType::f32, "accumulating " + std::string(dtype_name(src_t)) + " into a buffer",
                 "this is a bug: the engine accumulates f32 bucket output only");
    launch::accumulate(dst, int(dst_t), static_cast<const float*>(src), n, s.native_handle());
    return;
  }
  launch::cast(dst, int(dst_t), src, int(src_t), n, s.native_handle());
}

void CudaBackend::sum_squares(double* out, const void* x, DType t, int64_t n, bool accumulate, Stream& s) {
  launch::sum_squares(out, x, int(t), n, accumulate, square_scratch(s), s.native_handle());
}

void CudaBackend::adamw(const AdamWArgs& a, int32_t* nonfinite, Stream& s) {
  const kernel_math::AdamConsts c =
      kernel_math::adam_consts(a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.grad_scale, a.t, a.bias_correction);
  launch::AdamLaunch l{a.param,
                       a.m,
                       a.v,
                       a.grad,
                       int(a.grad_dtype),
                       a.param_out,
                       int(a.out_dtype),
                       a.n,
                       c.beta1,
                       c.beta2,
                       c.one_minus_beta1,
                       c.one_minus_beta2,
                       c.step_size,
                       c.inv_sqrt_bc2,
                       c.eps,
                       c.decay_mul,
                       c.grad_scale};
  if (a.m16 || a.v16 || a.param16) {
    const kernel_math::Adam16Keys keys = kernel_math::adam16_keys(a.seed, a.t);
    l.m16 = a.m16, l.v16 = a.v16, l.param16 = a.param16, l.stochastic = a.stochastic;
    l.key_lo = keys.lo, l.key_hi = keys.hi, l.key_p = keys.p, l.index_base = a.index_base;
  }
  launch::adamw(l, nonfinite, s.native_handle());
}

const int32_t* CudaBackend::stage_tokens(std::span<const int32_t> ids, int64_t limit, const char* what) {
  for (size_t n = 0; n < ids.size(); ++n)  // as the CPU backend: a clear error, not a wild read
    STRATA_CHECK(ids[n] < limit && (ids[n] >= 0 || std::strcmp(what, "target") == 0),
                 std::string(what) + " id " + std::to_string(ids[n]) + " at position " + std::to_string(n) +
                     " is outside the vocabulary of " + std::to_string(limit),
                 "the data was tokenized for a different vocabulary: check --data and --model");
  TokenSlot& t = token_slots_[next_token_slot_];
  next_token_slot_ = (next_token_slot_ + 1) % kernel_math::kTokenSlots;
  t.copied->synchronize();        // the slot's previous upload has left its pinned memory
  if (ids.size() > t.capacity) {  // the first micro-batch of a shape only
    if (t.host) STRATA_CUDA_CHECK(cudaFreeHost(t.host));
    t.host = nullptr, t.device = {};
    STRATA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&t.host), ids.size() * 4, cudaHostAllocPortable));
    t.device = allocate(ids.size() * 4, "cuda:token-ids");
    t.capacity = ids.size();
  }
  std::memcpy(t.host, ids.data(), ids.size() * 4);
  STRATA_CUDA_CHECK(cudaMemcpyAsync(t.device.data(), t.host, ids.size() * 4, cudaMemcpyHostToDevice,
                                    static_cast<cudaStream_t>(cs())));
  compute_->record(*t.copied);
  return t.device.as<int32_t>();
}

kernel_math::AttnRecords CudaBackend::stage_records(std::span<const int32_t> positions, int64_t B, int64_t T,
                                                    const char* op) {
  if (positions.empty()) return {};
  const size_t n = positions.size();
  TokenSlot& r = records_;
  if (records_staged_ != n || std::memcmp(r.host, positions.data(), n * 4) != 0) {
    check_positions(positions, B, T, op);
    r.copied->synchronize();   // the previous upload has left the pinned copy
    if (2 * n > r.capacity) {  // the first micro-batch of a shape only
      if (r.host) STRATA_CUDA_CHECK(cudaFreeHost(r.host));
      r.host = nullptr, r.device = {};
      STRATA_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&r.host), 2 * n * 4, cudaHostAllocPortable));
      r.device = allocate(2 * n * 4, "cuda:packed-positions");
      r.capacity = 2 * n;
    }
    std::memcpy(r.host, positions.data(), n * 4);
    kernel_math::segment_last_rows(r.host + n, r.host, B, T);
    // Ordered on the compute stream: the kernels that read the previous positions run first.
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(r.device.data(), r.host, 2 * n * 4, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(cs())));
    compute_->record(*r.copied);
    records_staged_ = n;
  }
  const int32_t* d = r.device.as<int32_t>();
  return {d, d + n};
}

const float* CudaBackend::rope_table(int64_t T, int head_dim, const RopeSpec& rope) {
  for (const RopeTable& r : rope_tables_)
    if (r.T == T && r.head_dim == head_dim && r.rope == rope) return r.table.as<float>();
  Buffer b = allocate(kernel_math::rope_table_bytes(T, head_dim), "cuda:rope-table");
  launch::rope_table(b.as<float>(), T, head_dim, rope, cs());
  rope_tables_.push_back({T, head_dim, rope, std::move(b)});
  return rope_tables_.back().table.as<float>();
}

}  // namespace strata::cuda
