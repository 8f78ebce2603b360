// row_kernels.h's activation kernels (GPT-2's tanh GELU, Llama's SwiGLU, forward and
// backward), written once over a vector type V as row_kernels_impl.h's are; V also provides
// div, min and fnmadd(a, b, c) = c − a·b. Every lane takes the former 8-lane arithmetic
// (simd::tanh8's formula; GPT-2's fused matmul + GELU and ops_llama.cpp's SwiGLU), op for op,
// so the AVX-512 set gives the AVX2 set's bits (exp16 is exp8 lane for lane). A last partial
// vector goes through zero-padded copies: the same arithmetic.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "cpu/row_kernels.h"

namespace strata::cpu::act_impl {

// tanh(u) = 1 − 2/(exp(2u) + 1), |u| clamped to 9 (tanh(9) = 1 in f32): simd::tanh8.
template <class V>
typename V::F tanh(typename V::F u) {
  const auto c = V::set1(9.0f);
  u = V::min(V::max(u, V::sub(V::zero(), c)), c);
  const auto e = V::exp(V::add(u, u));
  return V::sub(V::set1(1.0f), V::div(V::set1(2.0f), V::add(e, V::set1(1.0f))));
}

template <class V>
typename V::F gelu(typename V::F x) {
  const auto k = V::set1(0.7978845608028654f), a = V::set1(0.044715f), half = V::set1(0.5f);
  const auto x3 = V::mul(V::mul(x, x), x);
  const auto th = tanh<V>(V::mul(k, V::fmadd(a, x3, x)));
  return V::mul(V::mul(half, x), V::add(V::set1(1.0f), th));
}

// d/dx gelu(x) = 0.5(1 + th) + 0.5·x·(1 − th²)·k·(1 + 3a·x²)
template <class V>
typename V::F gelu_grad(typename V::F x) {
  const auto k = V::set1(0.7978845608028654f), a = V::set1(0.044715f), half = V::set1(0.5f);
  const auto one = V::set1(1.0f), x2 = V::mul(x, x);
  const auto th = tanh<V>(V::mul(k, V::fmadd(V::mul(a, x2), x, x)));
  const auto sech2 = V::fnmadd(th, th, one);
  const auto inner = V::mul(k, V::fmadd(V::mul(V::set1(3.0f), a), x2, one));
  return V::fmadd(V::mul(half, x), V::mul(sech2, inner), V::mul(half, V::add(one, th)));
}

template <class V>
typename V::F sigmoid(typename V::F g) {
  const auto one = V::set1(1.0f);
  return V::div(one, V::add(one, V::exp(V::sub(V::zero(), g))));
}

// Runs f(i, n) over full vectors (n = W) and then once over the last partial one.
template <class V, class F>
void vectors(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) f(i, V::W);
  if (i < n) f(i, n - i);
}

// The vector at p + i, through a zero-padded copy where fewer than W remain.
template <class V, class T>
typename V::F load(const T* p, int64_t i, int64_t n) {
  if (n == V::W) return V::load(p + i);
  T t[V::W] = {};
  std::memcpy(t, p + i, size_t(n) * sizeof(T));
  return V::load(t);
}
template <class V, class T>
void store(T* p, int64_t i, int64_t n, typename V::F v) {
  if (n == V::W) return V::store(p + i, v);
  T t[V::W];
  V::store(t, v);
  std::memcpy(p + i, t, size_t(n) * sizeof(T));
}

template <class V, class T>
void gelu_forward(T* y, const T* x, int64_t n) {
  vectors<V>(n, [&](int64_t i, int64_t w) { store<V>(y, i, w, gelu<V>(load<V>(x, i, w))); });
}

template <class V, class T>
void gelu_backward(T* dx, const T* x, const T* dy, int64_t n) {
  vectors<V>(
      n, [&](int64_t i, int64_t w) { store<V>(dx, i, w, V::mul(gelu_grad<V>(load<V>(x, i, w)), load<V>(dy, i, w))); });
}

template <class V, class T>
void swiglu_forward(T* y, const T* g, const T* u, int64_t n) {
  vectors<V>(n, [&](int64_t i, int64_t w) {
    const auto gv = load<V>(g, i, w);
    store<V>(y, i, w, V::mul(V::mul(gv, sigmoid<V>(gv)), load<V>(u, i, w)));
  });
}

// dg = dy·u·s·(1 + g·(1 − s)), du = dy·silu(g) with s = sigmoid(g).
template <class V, class T>
void swiglu_backward(T* dg, T* du, const T* g, const T* u, const T* dy, int64_t n) {
  vectors<V>(n, [&](int64_t i, int64_t w) {
    const auto one = V::set1(1.0f), gv = load<V>(g, i, w), dyv = load<V>(dy, i, w);
    const auto s = sigmoid<V>(gv);
    store<V>(dg, i, w, V::mul(V::mul(V::mul(dyv, load<V>(u, i, w)), s), V::fmadd(gv, V::sub(one, s), one)));
    store<V>(du, i, w, V::mul(dyv, V::mul(gv, s)));
  });
}

template <class V, class T>
void geglu_forward(T* y, const T* g, const T* u, int64_t n) {
  vectors<V>(n, [&](int64_t i, int64_t w) { store<V>(y, i, w, V::mul(gelu<V>(load<V>(g, i, w)), load<V>(u, i, w))); });
}

// dg = dy·u·gelu'(g), du = dy·gelu(g).
template <class V, class T>
void geglu_backward(T* dg, T* du, const T* g, const T* u, const T* dy, int64_t n) {
  vectors<V>(n, [&](int64_t i, int64_t w) {
    const auto gv = load<V>(g, i, w), dyv = load<V>(dy, i, w);
    store<V>(dg, i, w, V::mul(V::mul(dyv, load<V>(u, i, w)), gelu_grad<V>(gv)));
    store<V>(du, i, w, V::mul(dyv, gelu<V>(gv)));
  });
}

template <class V, class T>
ActRows<T> act_rows() {
  return {gelu_forward<V, T>,    gelu_backward<V, T>, swiglu_forward<V, T>,
          swiglu_backward<V, T>, geglu_forward<V, T>, geglu_backward<V, T>};
}

}  // namespace strata::cpu::act_impl
