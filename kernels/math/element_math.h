// The per-element math of the CUDA kernels (f32 in, f32 out), compiled for the device by
// the .cu files and for the host by tests/test_kernel_math.cpp, which holds it to the CPU
// backend's ops. Reductions (row sums, maxima) are each side's own; what is done with
// their results is here.
#pragma once
#include <cmath>

#include "core/hd.h"
#include "kernels/math/rope_math.h"

namespace strata::kernel_math {

// ---- GELU (tanh approximation, GPT-2) ----
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;
STRATA_HD float gelu(float x) {
  const float th = tanhf(kGeluK * (x + kGeluA * x * x * x));
  return 0.5f * x * (1.0f + th);
}
// d/dx gelu(x) = 0.5(1 + th) + 0.5·x·(1 - th²)·k·(1 + 3a·x²)
STRATA_HD float gelu_grad(float x) {
  const float x2 = x * x, th = tanhf(kGeluK * (x + kGeluA * x2 * x));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * kGeluK * (1.0f + 3.0f * kGeluA * x2);
}

// ---- SwiGLU: out = silu(g)·u ----
STRATA_HD float silu(float g) { return g / (1.0f + expf(-g)); }
STRATA_HD float swiglu(float g, float u) { return silu(g) * u; }
// dg = dy·u·σ(g)·(1 + g·(1 - σ(g))), du = dy·silu(g)
STRATA_HD void swiglu_grad(float g, float u, float dy, float* dg, float* du) {
  const float s = 1.0f / (1.0f + expf(-g));
  *dg = dy * u * s * (1.0f + g * (1.0f - s));
  *du = dy * g * s;
}

// ---- GeGLU: out = gelu(g)·u (tanh GELU) ----
STRATA_HD float geglu(float g, float u) { return gelu(g) * u; }
// dg = dy·u·gelu'(g), du = dy·gelu(g)
STRATA_HD void geglu_grad(float g, float u, float dy, float* dg, float* du) {
  *dg = dy * u * gelu_grad(g);
  *du = dy * gelu(g);
}
STRATA_HD float gated(GatedAct act, float g, float u) { return act == GatedAct::silu ? swiglu(g, u) : geglu(g, u); }
STRATA_HD void gated_grad(GatedAct act, float g, float u, float dy, float* dg, float* du) {
  if (act == GatedAct::silu)
    swiglu_grad(g, u, dy, dg, du);
  else
    geglu_grad(g, u, dy, dg, du);
}

// ---- LayerNorm and RMSNorm, given each row's statistics ----
constexpr float kLayerNormEps = 1e-5f;
// rstd from the row's sum of squared deviations (layernorm) or of squares (rmsnorm).
STRATA_HD float norm_rstd(float sum_sq, int C, float eps) { return 1.0f / sqrtf(sum_sq / float(C) + eps); }
STRATA_HD float layernorm_out(float x, float mean, float rstd, float w, float b) { return (x - mean) * rstd * w + b; }
// dx += (dnorm - mean(dnorm) - x̂·mean(dnorm·x̂))·rstd, dnorm = w·dy, x̂ = (x - mean)·rstd
STRATA_HD float layernorm_dx(float x, float mean, float rstd, float w, float dy, float dnorm_mean,
                             float dnorm_norm_mean) {
  const float norm = (x - mean) * rstd;
  return (w * dy - dnorm_mean - norm * dnorm_norm_mean) * rstd;
}
// (w: the scale, the weight plus any offset, as Gemma's 1 + w)
STRATA_HD float rmsnorm_out(float x, float rstd, float w) { return x * rstd * w; }
// dx += rstd·(w·dy - x̂·dot), dot = mean(w·dy·x̂), x̂ = x·rstd
STRATA_HD float rmsnorm_dx(float x, float rstd, float w, float dy, float dot) {
  return rstd * (w * dy - x * rstd * dot);
}

// ---- soft-capping (Gemma-2's logits and attention scores): cap·tanh(x/cap); cap 0 leaves x ----
// A column block added into a wider row (Backend::add_columns): y + alpha·x, one rounding
// of the product-sum, alike on both backends.
STRATA_HD float scaled_add(float y, float x, float alpha) { return fmaf(alpha, x, y); }

STRATA_HD float softcapped(float x, float cap) { return cap > 0.0f ? cap * tanhf(x / cap) : x; }
// d(capped)/dx from the capped value: 1 - tanh² (1 without a cap).
STRATA_HD float softcap_grad(float capped, float cap) {
  if (cap <= 0.0f) return 1.0f;
  const float t = capped / cap;
  return 1.0f - t * t;
}

// ---- softmax cross-entropy, given the row's maximum and Σ exp(x - max) ----
// The gradient of one logit: dloss·(softmax - onehot).
STRATA_HD float cross_entropy_grad(float logit, float row_max, double sum_exp, float dloss, bool is_target) {
  const float scale = float(double(dloss) / sum_exp);
  return expf(logit - row_max) * scale - (is_target ? dloss : 0.0f);
}
STRATA_HD double cross_entropy_loss(float row_max, double sum_exp, float target_logit) {
  return double(row_max) + log(sum_exp) - double(target_logit);
}

// ---- AdamW (the CPU scalar kernel's arithmetic, fused multiply-adds in the same places) ----
struct AdamConsts {
  float beta1, beta2, one_minus_beta1, one_minus_beta2;
  float step_size;     // -lr / (1 - β1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - β2^t)
  float eps, decay_mul, grad_scale;
};
inline AdamConsts adam_consts(float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                              long long t, bool bias_correction = true) {
  AdamConsts c{};
  const double bc1 = bias_correction ? 1.0 - std::pow(double(beta1), double(t)) : 1.0,
               bc2 = bias_correction ? 1.0 - std::pow(double(beta2), double(t)) : 1.0;
  c.beta1 = beta1, c.beta2 = beta2, c.one_minus_beta1 = 1.0f - beta1, c.one_minus_beta2 = 1.0f - beta2;
  c.step_size = float(-double(lr) / bc1);
  c.inv_sqrt_bc2 = float(1.0 / std::sqrt(bc2));
  c.eps = eps, c.decay_mul = 1.0f - lr * weight_decay, c.grad_scale = grad_scale;
  return c;
}
// Updates one element in place; false when the raw gradient is not finite.
STRATA_HD bool adamw_element(float* p, float* m, float* v, float raw_grad, const AdamConsts& c) {
  const float g = raw_grad * c.grad_scale;
  const float mn = fmaf(c.beta1, *m, c.one_minus_beta1 * g);
  const float vn = fmaf(c.beta2, *v, (c.one_minus_beta2 * g) * g);
  const float d = fmaf(sqrtf(vn), c.inv_sqrt_bc2, c.eps);
  *p = fmaf(c.step_size, mn / d, *p * c.decay_mul);
  *m = mn, *v = vn;
  return raw_grad - raw_grad == 0.0f;  // false for Inf and NaN (no -ffast-math anywhere)
}

}  // namespace strata::kernel_math
