#include "cpu/gemm_lowp.h"

#include <cstring>
#include <dnnl.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/error.h"

namespace strata::cpu {

namespace {

using dt = dnnl::memory::data_type;

// One shape's primitive, its operands' memory objects (data handles set per call) and its
// scratchpad: made on the shape's first call, reused for every later one.
struct Entry {
  bool native = false;
  std::string impl;
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias, scratch;
  std::unique_ptr<char[]> scratch_bytes;
};

// M, N, K, lda, ldb, ldc, ta, tb, operand dtype, alpha, beta, output dtype, bias dtype (-1: none).
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, int, float, float, int, int>;

dt dnnl_type(DType t) { return t == DType::bf16 ? dt::bf16 : t == DType::f16 ? dt::f16 : dt::f32; }

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Native means a kernel that computes in the 16-bit format (AMX tiles, AVX512-BF16's dot
// products, AVX512-FP16): oneDNN's reference and emulating kernels are slower than the f32
// panels this replaces.
bool is_native(const std::string& impl, DType t) {
  if (impl.find("amx") != std::string::npos) return true;
  if (t == DType::f16) return impl.find("avx512_core_fp16") != std::string::npos;
  // For strided operands oneDNN picks its bf16 GEMM ("gemm:jit"), which uses the CPU's bf16
  // dot products when it has them and emulates them otherwise.
  return impl.find("avx512_core_bf16") != std::string::npos ||
         (impl == "gemm:jit" && __builtin_cpu_supports("avx512bf16"));
}

Entry make_entry(const Key& k, DType t) {
  const auto [M, N, K, lda, ldb, ldc, ta, tb, dtype, alpha, beta, out_dtype, bias_dtype] = k;
  const dt in = dnnl_type(t);
  // Row-major op(A)[M,K], op(B)[K,N] and C[M,N], each with its leading dimension; a
  // transposed operand is the same memory with its strides swapped.
  const dnnl::memory::desc a_md({M, K}, in, ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
  const dnnl::memory::desc b_md({K, N}, in, tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
  const dnnl::memory::desc c_md({M, N}, dnnl_type(DType(out_dtype)), dnnl::memory::dims{ldc, 1});
  const dnnl::memory::desc bias_md =
      bias_dtype < 0 ? dnnl::memory::desc()
                     : dnnl::memory::desc({1, N}, dnnl_type(DType(bias_dtype)), dnnl::memory::dims{N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // Strata's, allocated once: no allocation per call
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(beta);
    attr.set_post_ops(po);
  }
  Entry e;
  try {
    const dnnl::matmul::desc desc =
        bias_dtype < 0 ? dnnl::matmul::desc(a_md, b_md, c_md) : dnnl::matmul::desc(a_md, b_md, bias_md, c_md);
    const dnnl::matmul::primitive_desc pd(desc, attr, engine());
    e.impl = pd.impl_info_str();
    e.native = is_native(e.impl, t);
    if (!e.native) return e;
    e.prim = dnnl::matmul(pd);
    e.a = dnnl::memory(a_md, engine(), nullptr);
    e.b = dnnl::memory(b_md, engine(), nullptr);
    e.c = dnnl::memory(c_md, engine(), nullptr);
    if (bias_dtype >= 0) e.bias = dnnl::memory(bias_md, engine(), nullptr);
    const dnnl::memory::desc s_md = pd.scratchpad_desc();
    e.scratch_bytes.reset(new char[s_md.get_size() + 64]);
    e.scratch = dnnl::memory(s_md, engine(), e.scratch_bytes.get());
  } catch (const dnnl::error& err) {  // no implementation for this shape: the f32 panels serve
    e.native = false;
    e.impl = std::string("none (") + err.what() + ")";
  }
  return e;
}

}  // namespace

std::string lowp_gemm_amx_impl() {
  static const std::string impl = [] {
    const Key probe{256, 256, 256, 256, 256, 256, false, false, int(DType::bf16), 1.0f, 0.0f, int(DType::f32), -1};
    const std::string i = make_entry(probe, DType::bf16).impl;
    return i.find("amx") != std::string::npos ? i : std::string();
  }();
  return impl;
}

bool lowp_gemm(int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
               const LowpOut& C, std::string* impl) {
  if (A.dtype != B.dtype || (A.dtype != DType::bf16 && A.dtype != DType::f16) || M == 0 || N == 0 || K == 0 ||
      (C.dtype != DType::f32 && C.dtype != A.dtype))
    return false;
  const Key key{M,
                N,
                K,
                A.ld,
                B.ld,
                C.ld,
                A.trans,
                B.trans,
                int(A.dtype),
                alpha,
                beta,
                int(C.dtype),
                C.bias ? int(C.bias_dtype) : -1};
  // Per thread: a primitive and its memory objects are used by one thread at a time.
  thread_local std::map<Key, Entry> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_entry(key, A.dtype)).first;
  Entry& e = it->second;
  if (impl) *impl = e.impl;
  if (!e.native) return false;
  e.a.set_data_handle(const_cast<void*>(A.data));
  e.b.set_data_handle(const_cast<void*>(B.data));
  e.c.set_data_handle(C.data);
  if (C.bias) e.bias.set_data_handle(const_cast<void*>(C.bias));
  thread_local dnnl::stream stream(engine());
  // The C interface with the arguments on the stack: the C++ one takes a std::unordered_map.
  const dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e.a.get()},
                                   {DNNL_ARG_WEIGHTS, e.b.get()},
                                   {DNNL_ARG_DST, e.c.get()},
                                   {DNNL_ARG_SCRATCHPAD, e.scratch.get()},
                                   {DNNL_ARG_BIAS, C.bias ? e.bias.get() : nullptr}};
  dnnl_status_t st = dnnl_primitive_execute(e.prim.get(), stream.get(), C.bias ? 5 : 4, args);
  if (st == dnnl_success) st = dnnl_stream_wait(stream.get());
  STRATA_CHECK(st == dnnl_success,
               "oneDNN matmul (" + e.impl + ", M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                   ", K=" + std::to_string(K) + ") failed with status " + std::to_string(int(st)),
               "set STRATA_LOWP_GEMM=off to use the f32 path, and report this");
  return true;
}

}  // namespace strata::cpu
