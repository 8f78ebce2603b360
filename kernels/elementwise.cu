// Elementwise kernels: residual add, casts, accumulation, GELU, SwiGLU and the bias add.
// bf16/f16 arithmetic happens in f32; the math is kernels/math/element_math.h's.
#include "kernels/device_common.cuh"
#include "kernels/launch.h"
#include "kernels/math/dropout_math.h"
#include "kernels/math/element_math.h"

namespace strata::cuda::launch {

namespace km = strata::kernel_math;

namespace {

#define STRATA_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <typename T>
__global__ void residual_kernel(T* out, const T* a, const T* b, int64_t n) {
  STRATA_GRID_STRIDE(i, n) store(out, i, load(a, i) + load(b, i));
}

template <typename T>
__global__ void scale_kernel(T* x, float alpha, int64_t n) {
  STRATA_GRID_STRIDE(i, n) store(x, i, load(x, i) * alpha);
}

template <typename T>
__global__ void add_columns_kernel(T* y, const T* x, int64_t N, int64_t w, int64_t W, int64_t first, float alpha) {
  STRATA_GRID_STRIDE(i, N * w) {
    const int64_t o = (i / w) * W + first + i % w;
    store(y, o, km::scaled_add(load(y, o), load(x, i), alpha));
  }
}

template <typename T>
__global__ void take_columns_kernel(T* x, const T* y, int64_t N, int64_t w, int64_t W, int64_t first, float alpha) {
  STRATA_GRID_STRIDE(i, N * w) store(x, i, load(y, (i / w) * W + first + i % w) * alpha);
}

template <typename D, typename S>
__global__ void cast_kernel(D* dst, const S* src, int64_t n) {
  STRATA_GRID_STRIDE(i, n) store(dst, i, load(src, i));
}

template <typename T>
__global__ void accumulate_kernel(T* dst, const float* src, int64_t n) {
  STRATA_GRID_STRIDE(i, n) store(dst, i, load(dst, i) + src[i]);
}

template <typename T>
__global__ void gelu_kernel(T* out, const T* inp, int64_t n) {
  STRATA_GRID_STRIDE(i, n) store(out, i, km::gelu(load(inp, i)));
}

// x [N, W] (N = B·T rows) in place times each element's dropout factor.
template <typename T>
__global__ void dropout_kernel(T* x, int64_t n, int64_t T_len, int64_t W, DropoutSpec drop) {
  STRATA_GRID_STRIDE(i, n) {
    const int64_t row = i / W;
    store(x, i,
          load(x, i) * km::dropout_mult(drop, km::dropout_index(drop, row / T_len, row % T_len, i % W, T_len, W)));
  }
}

// dinp may alias dout: each element is read before it is written, by the same thread.
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, int64_t n) {
  STRATA_GRID_STRIDE(i, n) store(dinp, i, km::gelu_grad(load(inp, i)) * load(dout, i));
}

template <typename T>
__global__ void swiglu_kernel(T* out, const T* gu, int64_t N, int64_t I, GatedAct act) {
  STRATA_GRID_STRIDE(k, N * I) {
    const int64_t n = k / I, i = k % I;
    store(out, k, km::gated(act, load(gu, n * 2 * I + i), load(gu, n * 2 * I + I + i)));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dgu, const T* gu, const T* dout, int64_t N, int64_t I, GatedAct act) {
  STRATA_GRID_STRIDE(k, N * I) {
    const int64_t n = k / I, i = k % I;
    float dg, du;
    km::gated_grad(act, load(gu, n * 2 * I + i), load(gu, n * 2 * I + I + i), load(dout, k), &dg, &du);
    store(dgu, n * 2 * I + i, dg);
    store(dgu, n * 2 * I + I + i, du);
  }
}

template <typename T, typename B>
__global__ void add_bias_kernel(T* out, const B* bias, int64_t N, int64_t C) {
  STRATA_GRID_STRIDE(k, N * C) store(out, k, load(out, k) + load(bias, k % C));
}

}  // namespace

void residual(void* out, const void* a, const void* b, int64_t n, int dtype, void* stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    residual_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void scale(void* x, float alpha, int64_t n, int dtype, void* stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    scale_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(static_cast<T*>(x), alpha, n);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void add_columns(void* y, const void* x, int64_t N, int64_t w, int64_t W, int64_t first, float alpha, int dtype,
                 void* stream) {
  if (N * w == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    add_columns_kernel<<<km::grid_for(N * w), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(y), static_cast<const T*>(x), N, w, W, first, alpha);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void take_columns(void* x, const void* y, int64_t N, int64_t w, int64_t W, int64_t first, float alpha, int dtype,
                  void* stream) {
  if (N * w == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    take_columns_kernel<<<km::grid_for(N * w), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(x), static_cast<const T*>(y), N, w, W, first, alpha);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void cast(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, void* stream) {
  if (n == 0) return;
  if (dst_dtype == src_dtype) {  // a plain copy (the engine's same-dtype convert)
    const size_t esz = dst_dtype == 0 ? 4 : 2;
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * esz, cudaMemcpyDeviceToDevice, as_stream(stream)));
    return;
  }
  dispatch(dst_dtype, [&](auto* dtag) {
    dispatch(src_dtype, [&](auto* stag) {
      using D = STRATA_ELEM(dtag);
      using S = STRATA_ELEM(stag);
      cast_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(static_cast<D*>(dst),
                                                                           static_cast<const S*>(src), n);
    });
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void accumulate(void* dst, int dst_dtype, const float* src, int64_t n, void* stream) {
  if (n == 0) return;
  dispatch(dst_dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    accumulate_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(static_cast<T*>(dst), src, n);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void gelu_forward(void* out, const void* inp, int64_t n, int dtype, void* stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    gelu_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(static_cast<T*>(out),
                                                                         static_cast<const T*>(inp), n);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void dropout(void* x, int64_t n, int64_t T, int64_t W, const DropoutSpec& drop, int dtype, void* stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    dropout_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(static_cast<E*>(x), n, T, W, drop);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void gelu_backward(void* dinp, const void* inp, const void* dout, int64_t n, int dtype, void* stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    gelu_backward_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(dinp), static_cast<const T*>(inp), static_cast<const T*>(dout), n);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void swiglu_forward(void* out, const void* gate_up, int64_t N, int64_t I, GatedAct act, int dtype, void* stream) {
  if (N * I == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    swiglu_kernel<<<km::grid_for(N * I), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(out), static_cast<const T*>(gate_up), N, I, act);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int64_t N, int64_t I, GatedAct act,
                     int dtype, void* stream) {
  if (N * I == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using T = STRATA_ELEM(tag);
    swiglu_backward_kernel<<<km::grid_for(N * I), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<T*>(dgate_up), static_cast<const T*>(gate_up), static_cast<const T*>(dout), N, I, act);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void add_bias(void* out, int out_dtype, const void* bias, int bias_dtype, int64_t N, int64_t C, void* stream) {
  if (N * C == 0) return;
  dispatch(out_dtype, [&](auto* otag) {
    dispatch(bias_dtype, [&](auto* btag) {
      using T = STRATA_ELEM(otag);
      using B = STRATA_ELEM(btag);
      add_bias_kernel<<<km::grid_for(N * C), km::kThreads, 0, as_stream(stream)>>>(static_cast<T*>(out),
                                                                                   static_cast<const B*>(bias), N, C);
    });
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::launch
