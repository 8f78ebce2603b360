// row_kernels.h's kernels, written once over a vector type V (8 or 16 f32 lanes) and
// included by one file per ISA. V provides: F (the register), W (lanes), load/store of
// f32|bf16|f16, zero, set1, add, sub, mul, fmadd(a, b, c) = a·b + c, max, sum, hmax, exp.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "cpu/row_kernels.h"

namespace strata::cpu::row_impl {

template <class V, class T>
void layernorm_forward(T* y, const T* x, const T* w, const T* b, int64_t C, float* mean, float* rstd) {
  using F = typename V::F;
  const int64_t Cv = C / V::W * V::W;
  F acc = V::zero();
  for (int64_t c = 0; c < Cv; c += V::W) acc = V::add(acc, V::load(x + c));
  float s = V::sum(acc);
  for (int64_t c = Cv; c < C; ++c) s += to_f32(x[c]);
  const float m = s / float(C);
  const F vm = V::set1(m);
  acc = V::zero();
  for (int64_t c = 0; c < Cv; c += V::W) {
    const F d = V::sub(V::load(x + c), vm);
    acc = V::fmadd(d, d, acc);
  }
  float v = V::sum(acc);
  for (int64_t c = Cv; c < C; ++c) v += (to_f32(x[c]) - m) * (to_f32(x[c]) - m);
  const float r = 1.0f / std::sqrt(v / float(C) + 1e-5f);
  const F vr = V::set1(r);
  for (int64_t c = 0; c < Cv; c += V::W)
    V::store(y + c, V::fmadd(V::mul(V::sub(V::load(x + c), vm), vr), V::load(w + c), V::load(b + c)));
  for (int64_t c = Cv; c < C; ++c) y[c] = from_f32<T>(std::fma((to_f32(x[c]) - m) * r, to_f32(w[c]), to_f32(b[c])));
  *mean = m;
  *rstd = r;
}

template <class V, class T>
void layernorm_backward(T* dx, float* pdw, float* pdb, const T* dy, const T* x, const T* w, float m, float r,
                        int64_t C) {
  using F = typename V::F;
  const int64_t Cv = C / V::W * V::W;
  const F vm = V::set1(m), vr = V::set1(r);
  F a1 = V::zero(), a2 = V::zero();
  for (int64_t c = 0; c < Cv; c += V::W) {
    const F norm = V::mul(V::sub(V::load(x + c), vm), vr), dn = V::mul(V::load(w + c), V::load(dy + c));
    a1 = V::add(a1, dn);
    a2 = V::fmadd(dn, norm, a2);
  }
  float dnorm_mean = V::sum(a1), dnorm_norm_mean = V::sum(a2);
  for (int64_t c = Cv; c < C; ++c) {
    const float norm = (to_f32(x[c]) - m) * r, dn = to_f32(w[c]) * to_f32(dy[c]);
    dnorm_mean += dn;
    dnorm_norm_mean += dn * norm;
  }
  dnorm_mean /= float(C);
  dnorm_norm_mean /= float(C);
  const F vdm = V::set1(dnorm_mean), vdnm = V::set1(dnorm_norm_mean);
  for (int64_t c = 0; c < Cv; c += V::W) {
    const F norm = V::mul(V::sub(V::load(x + c), vm), vr), g = V::load(dy + c);
    V::store(pdb + c, V::add(V::load(pdb + c), g));
    V::store(pdw + c, V::fmadd(norm, g, V::load(pdw + c)));
    const F dn = V::mul(V::load(w + c), g);
    const F d = V::sub(V::sub(dn, vdm), V::mul(norm, vdnm));
    V::store(dx + c, V::fmadd(d, vr, V::load(dx + c)));
  }
  for (int64_t c = Cv; c < C; ++c) {
    const float norm = (to_f32(x[c]) - m) * r, g = to_f32(dy[c]);
    pdb[c] += g;
    pdw[c] = std::fma(norm, g, pdw[c]);
    const float dn = to_f32(w[c]) * g;
    dx[c] = from_f32<T>(std::fma(dn - dnorm_mean - norm * dnorm_norm_mean, r, to_f32(dx[c])));
  }
}

template <class V, class T>
void rmsnorm_forward(T* y, const T* x, const T* w, float wofs, int64_t C, float eps, float* rstd) {
  using F = typename V::F;
  const int64_t Cv = C / V::W * V::W;
  F acc = V::zero();
  for (int64_t c = 0; c < Cv; c += V::W) {
    const F v = V::load(x + c);
    acc = V::fmadd(v, v, acc);
  }
  float ss = V::sum(acc);
  for (int64_t c = Cv; c < C; ++c) ss += to_f32(x[c]) * to_f32(x[c]);
  const float r = 1.0f / std::sqrt(ss / float(C) + eps);
  const F vr = V::set1(r), vo = V::set1(wofs);
  for (int64_t c = 0; c < Cv; c += V::W)
    V::store(y + c, V::mul(V::mul(V::load(x + c), vr), V::add(V::load(w + c), vo)));
  for (int64_t c = Cv; c < C; ++c) y[c] = from_f32<T>(to_f32(x[c]) * r * (to_f32(w[c]) + wofs));
  *rstd = r;
}

template <class V, class T>
void rmsnorm_backward(T* dx, const T* dy, const T* x, const T* w, float wofs, float r, int64_t C, float* pdw,
                      bool accumulate) {
  using F = typename V::F;
  const int64_t Cv = C / V::W * V::W;
  const F vr = V::set1(r), vo = V::set1(wofs);
  F acc = V::zero();
  for (int64_t c = 0; c < Cv; c += V::W)
    acc = V::fmadd(V::mul(V::add(V::load(w + c), vo), V::load(dy + c)), V::mul(V::load(x + c), vr), acc);
  float dot = V::sum(acc);
  for (int64_t c = Cv; c < C; ++c) dot += (to_f32(w[c]) + wofs) * to_f32(dy[c]) * (to_f32(x[c]) * r);
  dot /= float(C);
  const F vdot = V::set1(dot);
  for (int64_t c = 0; c < Cv; c += V::W) {
    const F norm = V::mul(V::load(x + c), vr), g = V::load(dy + c);
    V::store(pdw + c, V::fmadd(norm, g, V::load(pdw + c)));
    const F d = V::mul(vr, V::sub(V::mul(V::add(V::load(w + c), vo), g), V::mul(norm, vdot)));
    V::store(dx + c, accumulate ? V::add(V::load(dx + c), d) : d);
  }
  for (int64_t c = Cv; c < C; ++c) {
    const float norm = to_f32(x[c]) * r, g = to_f32(dy[c]);
    pdw[c] = std::fma(norm, g, pdw[c]);
    const float d = r * ((to_f32(w[c]) + wofs) * g - norm * dot);
    dx[c] = from_f32<T>(accumulate ? to_f32(dx[c]) + d : d);
  }
}

template <class V>
double softmax_ce(float* row, int64_t vocab, int32_t t, float dloss) {
  using F = typename V::F;
  const int64_t Vv = vocab / V::W * V::W;
  F vmx = V::set1(-INFINITY);
  for (int64_t v = 0; v < Vv; v += V::W) vmx = V::max(vmx, V::load(row + v));
  float mx = V::hmax(vmx);
  for (int64_t v = Vv; v < vocab; ++v) mx = row[v] > mx ? row[v] : mx;
  const double target_logit = double(row[t]);
  const F shift = V::set1(mx);
  F acc = V::zero();
  for (int64_t v = 0; v < Vv; v += V::W) {
    const F e = V::exp(V::sub(V::load(row + v), shift));
    V::store(row + v, e);
    acc = V::add(acc, e);
  }
  double sum = V::sum(acc);
  for (int64_t v = Vv; v < vocab; ++v) sum += (row[v] = std::exp(row[v] - mx));
  const double lse = double(mx) + std::log(sum);
  const F scale = V::set1(float(double(dloss) / sum));
  for (int64_t v = 0; v < Vv; v += V::W) V::store(row + v, V::mul(V::load(row + v), scale));
  const float s = float(double(dloss) / sum);
  for (int64_t v = Vv; v < vocab; ++v) row[v] *= s;
  row[t] -= dloss;
  return lse - target_logit;
}

template <class V, class T>
NormRows<T> norm_rows() {
  return {layernorm_forward<V, T>, layernorm_backward<V, T>, rmsnorm_forward<V, T>, rmsnorm_backward<V, T>};
}

}  // namespace strata::cpu::row_impl
