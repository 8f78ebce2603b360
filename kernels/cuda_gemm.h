// The backend's matmuls on cuBLASLt: out = inp·Wᵀ (+ bias in the epilogue), dinp = dout·W,
// dweight += doutᵀ·inp (f32 accumulation into the f32 gradient). Row-major tensors are
// handed to column-major cuBLASLt transposed (llm.c's trick), so no data moves.
// Descriptors and the chosen algorithm are made once per shape and kept.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

#include "core/tensor.h"

namespace strata::cuda {

class Gemm {
 public:
  // workspace: device memory cuBLASLt may use (kept for the backend's life).
  Gemm(void* workspace, size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // What the epilogue adds: the bias (length m, d_type), and with `gelu_aux` set, D =
  // gelu(A·B + bias) with the pre-activation written to gelu_aux (ld = ldd; ldd % 8 == 0).
  struct Epilogue {
    const void* bias = nullptr;
    void* gelu_aux = nullptr;
  };
  // D[m×n] (col-major, ld ldd) = op(A)·op(B) + β·D (+ the epilogue); A, B in ab_type, D in d_type.
  void run(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B,
           int64_t ldb, void* D, int64_t ldd, DType ab_type, DType d_type, float beta, Epilogue epilogue, void* stream);

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int, bool>;
  Plan& plan(const Key& key);
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, Plan*> plans_;
};

}  // namespace strata::cuda
