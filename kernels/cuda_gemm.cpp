#include "kernels/cuda_gemm.h"

#include <cublasLt.h>

#include <string>

#include "core/error.h"
#include "kernels/cuda_check.h"

namespace strata::cuda {

namespace {

#define STRATA_CUBLAS_CHECK(call)                                                           \
  do {                                                                                      \
    cublasStatus_t strata_st_ = (call);                                                     \
    if (strata_st_ != CUBLAS_STATUS_SUCCESS)                                                \
      ::strata::cuda::fail(#call, cublasLtGetStatusString(strata_st_), __FILE__, __LINE__); \
  } while (0)

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

}  // namespace

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

Gemm::Gemm(void* workspace, size_t workspace_bytes) : workspace_(workspace), workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h;
  STRATA_CUBLAS_CHECK(cublasLtCreate(&h));
  handle_ = h;
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) delete p;
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

Gemm::Plan& Gemm::plan(const Key& key) {
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  // epi: 0 none, 1 bias, 2 gelu with aux, 3 gelu with aux and bias
  const auto [ta, tb, m, n, k, lda, ldb, ldd, ab, dt, epi, accumulate] = key;
  auto* p = new Plan;
  try {
    // f32 accumulation always; f32 operands stay f32 (no TF32), so parity holds to f32 rounding.
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (epi != 0) {
      // cuBLASLt's GELU is the tanh approximation, GPT-2's (kernel_math::gelu).
      const cublasLtEpilogue_t e = epi == 1   ? CUBLASLT_EPILOGUE_BIAS
                                   : epi == 2 ? CUBLASLT_EPILOGUE_GELU_AUX
                                              : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
      STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
      const cudaDataType_t bt = cuda_type(DType(dt));
      STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
      if (epi >= 2) {
        const int64_t aux_ld = ldd;
        STRATA_CUBLAS_CHECK(
            cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
      }
    }
    const cudaDataType_t abt = cuda_type(DType(ab)), dtt = cuda_type(DType(dt));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, abt, ta ? k : m, ta ? m : k, lda));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, abt, tb ? n : k, tb ? k : n, ldb));
    STRATA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, dtt, m, n, ldd));
    cublasLtMatmulPreference_t pref;
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    STRATA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &workspace_bytes_, sizeof workspace_bytes_));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->a,
                                                             p->b, p->d, p->d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    STRATA_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0,
                 "cuBLASLt has no algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                     std::to_string(k) + " matmul (" + std::string(dtype_name(DType(ab))) + " operands, " +
                     std::string(dtype_name(DType(dt))) + " output" + (accumulate ? ", accumulating" : "") + ")",
                 "use --precision bf16 or f32; report the model's shape");
    p->algo = result.algo;
  } catch (...) {
    delete p;
    throw;
  }
  plans_.emplace(key, p);
  return *p;
}

void Gemm::run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B,
               int64_t ldb, void* D, int64_t ldd, DType ab_type, DType d_type, float beta, Epilogue e, void* stream) {
  if (m == 0 || n == 0) return;
  const int epi = e.gelu_aux ? (e.bias ? 3 : 2) : e.bias ? 1 : 0;
  Plan& p = plan(Key{trans_a, trans_b, m, n, k, lda, ldb, ldd, int(ab_type), int(d_type), epi, beta != 0.0f});
  // The pointers change per call (one plan serves every layer of a shape).
  if (e.bias)
    STRATA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias));
  if (e.gelu_aux)
    STRATA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.gelu_aux,
                                                       sizeof e.gelu_aux));
  const float alpha = 1.0f;
  STRATA_CUBLAS_CHECK(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.desc, &alpha, A, p.a, B, p.b, &beta, D,
                                     p.d, D, p.d, &p.algo, workspace_, workspace_bytes_,
                                     static_cast<cudaStream_t>(stream)));
}

}  // namespace strata::cuda
