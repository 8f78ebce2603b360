// What the backend's parameterised ops take besides tensors: the rotary embedding's
// frequencies (RopeSpec, from a model config's rope_theta and rope_scaling) and dropout's mask
// (DropoutSpec). Part of the Backend API: every backend's ops and the element math
// (kernels/math) read them. Plain structs, compiled by the host compiler and nvcc (C++17).
#pragma once
#include <cstdint>

#include "core/hd.h"

namespace strata {

// rope_scaling as transformers' ROPE_INIT_FUNCTIONS define it, for the types whose
// frequencies do not depend on the sequence length.
enum class RopeScaling : int { none = 0, linear = 1, llama3 = 2 };

struct RopeSpec {
  float theta = 10000.0f;
  RopeScaling scaling = RopeScaling::none;
  float factor = 1.0f;               // linear and llama3
  float low_freq_factor = 1.0f;      // llama3
  float high_freq_factor = 4.0f;     // llama3
  int original_max_position = 8192;  // llama3: original_max_position_embeddings
  int rotary_dim = 0;  // the leading dims of each head that rotate (Phi-3's partial_rotary_factor); 0: all
  // (Written out: the .cu files compile as C++17.)
  bool operator==(const RopeSpec& o) const {
    return theta == o.theta && scaling == o.scaling && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor && original_max_position == o.original_max_position &&
           rotary_dim == o.rotary_dim;
  }
};

// What a causal attention computes beyond softmax(q·kᵀ/√d)·v (the element math:
// kernels/math/attention_math.h).
struct AttentionSpec {
  int window = 0;        // > 0: query i sees only keys i - window < j ≤ i (a sliding window)
  float scale = 0.0f;    // the scores' scale; 0: 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-1/2)
  float softcap = 0.0f;  // > 0: each score s becomes softcap·tanh(s/softcap) before the softmax (Gemma-2)
};

// How the q/k RMSNorm normalises (Backend::qk_rmsnorm_forward, kernels/math/qk_norm_math.h).
struct QkNormSpec {
  bool whole = false;          // false: each head on its own (Qwen3, Gemma-3); true: all q heads as one vector, all
                               // k heads as another (OLMo-2)
  float weight_offset = 0.0f;  // the scale is (weight_offset + w): Gemma's norms take 1
};

// The gated MLP's activation: act(gate)·up with SiLU (SwiGLU: Llama) or the tanh GELU (GeGLU:
// Gemma's gelu_pytorch_tanh).
enum class GatedAct : int { silu = 0, gelu_tanh = 1 };

struct DropoutSpec {
  float p = 0.0f;          // drop probability; 0: the op is the identity
  float scale = 1.0f;      // 1/(1-p), the kept elements' factor
  uint32_t threshold = 0;  // keep iff the hash's high 32 bits ≥ this (p·2^32)
  uint64_t key = 0;        // (seed, site) mixed once on the host
  int64_t first_row = 0;   // global sample number of the batch's row 0
  STRATA_HD bool active() const { return p > 0.0f; }
};

}  // namespace strata
