// The bound `strata bench model` holds a training step to: the step's own linear-layer
// GEMMs — forward, and backward's input and weight gradients, for every layer and the head —
// timed alone through oneDNN in the step's precision — the faster of its native 16-bit matmul
// (where the CPU has one) and its f32 sgemm on the widened operands, shape by shape, as the
// step too takes the faster path — in the same run as the step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model_spec.h"

namespace strata::bench {

// One GEMM of a step's linear layers (fused q|k|v, fused gate|up, as the ops call them):
// C[M,N] (+)= op(A)·op(B), `count` times a step. Per layer: the forward y = x·Wᵀ, the input
// gradient dx = dy·W and the weight gradient dW += dyᵀ·x.
struct StepGemm {
  int64_t M, N, K;
  bool ta, tb;
  float beta;
  int count;
  double flops() const { return 2.0 * double(M) * double(N) * double(K); }
};
std::vector<StepGemm> step_gemms(const ModelSpec& spec, int batch, int seq_len);

struct GemmBound {
  double gflops = 0;          // the GEMMs' FLOPs ÷ their best time
  double flops_per_step = 0;  // the GEMMs' FLOPs in one step
  std::string impl;           // oneDNN's implementation of the largest GEMM
};

GemmBound measure_gemm_bound(const ModelSpec& spec, int batch, int seq_len, DType dtype, int reps = 3);

}  // namespace strata::bench
