// Raw-pointer launchers of the causal attention kernels (kernels/attention.cu), with the
// contract of cpu::attention_forward / cpu::attention_backward: qkv [B,T,3C] (q|k|v, each
// C = NH·hd, head h at columns h·hd), out and dout [B,T,C], lse f32 [B,NH,T] (log-sum-exp
// of the scaled scores), dqkv [B,T,3C] overwritten. No T×T matrix is ever stored: the
// forward is an online softmax, the backward recomputes the probabilities from lse.
// dtype codes: 0 = f32, 1 = bf16, 2 = f16 (arithmetic in f32); hd in 1..256. `stream` is
// a cudaStream_t. Deterministic: every output element is written once, by one thread.
#pragma once
#include <cstddef>

#include "kernels/math/attention_math.h"
#include "kernels/math/dropout_math.h"
#include "kernels/math/scratch_sizes.h"

namespace strata::cuda::launch {

// `drop`: attention dropout on the probabilities (kernels/math/dropout_math.h), inactive by
// default; `spec`: the sliding window, scale and soft-cap (AttentionSpec, attention_math.h);
// `rec`: packed rows' records, device arrays (attention_math.h's AttnRecords).
void attention_forward(void* out, float* lse, const void* qkv, int B, int T, int NH, int hd, int dtype,
                       const DropoutSpec& drop, const AttentionSpec& spec, const kernel_math::AttnRecords& rec,
                       void* stream);
// Device scratch the backward needs: D = Σ dout·out per row, f32 [B,NH,T].
using kernel_math::attention_backward_scratch_bytes;
void attention_backward(void* dqkv, const void* dout, const void* qkv, const void* out, const float* lse, void* scratch,
                        int B, int T, int NH, int hd, int dtype, const DropoutSpec& drop, const AttentionSpec& spec,
                        const kernel_math::AttnRecords& rec, void* stream);

}  // namespace strata::cuda::launch
