// Rotary position embeddings: which frequencies (RopeSpec, the model config's rope_theta and
// rope_scaling) and their math, shared by the CPU op, the CUDA table kernel and the tests.
// Hugging Face computes the inverse frequencies in f32 and the angle t·inv_freq in f32, so
// this does too: Llama-3.1/3.2 checkpoints see the frequencies they were trained with.
#pragma once
#include <cmath>

#include "backend/op_specs.h"
#include "core/hd.h"

namespace strata {

namespace kernel_math {

// The dims of a head of head_dim that rotate: the leading rotary_dim (partial rotary), or all.
STRATA_HD int rope_dims(const RopeSpec& r, int head_dim) { return r.rotary_dim > 0 ? r.rotary_dim : head_dim; }

// inv_freq of pair i of the rotating dims, head_dim of them here (transformers'
// _compute_{default,linear,llama3}_rope_parameters, whose dim is the rotary dims).
STRATA_HD float rope_inv_freq(int i, int head_dim, const RopeSpec& r) {
  const float inv = 1.0f / powf(r.theta, float(2 * i) / float(head_dim));
  if (r.scaling == RopeScaling::linear) return inv / r.factor;
  if (r.scaling != RopeScaling::llama3) return inv;
  // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, the band between
  // blended by where the wavelength falls between the two thresholds.
  const float old_len = float(r.original_max_position);
  const float low_wavelen = old_len / r.low_freq_factor, high_wavelen = old_len / r.high_freq_factor;
  const float wavelen = 2.0f * 3.14159265358979323846f / inv;
  if (wavelen < high_wavelen) return inv;
  if (wavelen > low_wavelen) return inv / r.factor;
  const float smooth = (old_len / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  return (1.0f - smooth) * inv / r.factor + smooth * inv;
}

// The angle of pair i at position t.
STRATA_HD float rope_angle(int t, int i, int head_dim, const RopeSpec& r) {
  return float(t) * rope_inv_freq(i, head_dim, r);
}

// (a, b) = (x_i, x_{i+d/2}) rotated by the angle with cosine c and sine s (s negated: inverse).
STRATA_HD void rope_rotate(float* a, float* b, float c, float s) {
  const float x = *a, y = *b;
  *a = x * c - y * s;
  *b = y * c + x * s;
}

}  // namespace kernel_math
}  // namespace strata
