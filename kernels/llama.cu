// The Llama-family kernels: rotary embeddings from a table built once per shape, and the
// grouped-query expansion around the fused attention (and its reduction back).
#include "kernels/device_common.cuh"
#include "kernels/launch.h"
#include "kernels/math/element_math.h"
#include "kernels/math/qk_norm_math.h"

namespace strata::cuda::launch {

namespace km = strata::kernel_math;

namespace {

__global__ void rope_table_kernel(float* table, int64_t T, int head_dim, RopeSpec rope) {
  const int half = head_dim / 2;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < T * half; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = k / half;
    const int i = int(k % half);
    const float a = km::rope_angle(int(t), i, head_dim, rope);
    table[2 * k] = cosf(a);
    table[2 * k + 1] = sinf(a);
  }
}

// One thread per (row, head, pair).
template <typename T>
__global__ void rope_kernel(T* x, const float* table, const int32_t* pos, int64_t BT, int64_t Tlen, int64_t W,
                            int first_head, int heads, int head_dim, int rot, float sign) {
  const int half = rot / 2;
  const int64_t total = BT * heads * half;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(k % half);
    const int h = int((k / half) % heads) + first_head;
    const int64_t n = k / (int64_t(half) * heads), t = pos ? pos[n] : n % Tlen;
    const int64_t base = n * W + int64_t(h) * head_dim;
    float a = load(x, base + i), b = load(x, base + i + half);
    km::rope_rotate(&a, &b, table[2 * (t * half + i)], sign * table[2 * (t * half + i) + 1]);
    store(x, base + i, a);
    store(x, base + i + half, b);
  }
}

// The q/k norm: one warp per (row, group) of the normalised groups (kernels/math/
// qk_norm_math.h), then one per v head of the row, which copies it.
template <typename T>
__global__ void qk_rmsnorm_kernel(T* out, float* rstd, const T* inp, const T* qkw, int64_t N, km::QkNormGroups q,
                                  float wofs, float eps) {
  const int64_t k = blockIdx.x * int64_t(km::kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int G = q.count(), per_row = G + q.NKV;
  if (k >= N * per_row) return;
  const int64_t n = k / per_row, row = n * q.row_width();
  const int g = int(k % per_row);
  if (g >= G) {  // a v head
    const int64_t base = row + int64_t(q.NH + q.NKV) * q.d + int64_t(g - G) * q.d;
    if (out != inp)
      for (int c = lane; c < q.d; c += 32) out[base + c] = inp[base + c];
    return;
  }
  const int64_t base = row + q.column(g);
  const int width = q.width(g);
  const T* w = qkw + q.weight_at(g);
  float ss = 0;
  for (int c = lane; c < width; c += 32) ss += load(inp, base + c) * load(inp, base + c);
  const float r = km::norm_rstd(warp_sum(ss), width, eps);
  for (int c = lane; c < width; c += 32)
    store(out, base + c, km::rmsnorm_out(load(inp, base + c), r, load(w, c) + wofs));
  if (lane == 0) rstd[n * G + g] = r;
}

// In place: every lane reads its elements of dy before the warp's sum, then writes them.
template <typename T>
__global__ void qk_rmsnorm_dx_kernel(T* g, const T* inp, const T* qkw, const float* rstd, int64_t N, km::QkNormGroups q,
                                     float wofs) {
  const int64_t k = blockIdx.x * int64_t(km::kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int G = q.count();
  if (k >= N * G) return;
  const int64_t n = k / G;
  const int grp = int(k % G), width = q.width(grp);
  const int64_t base = n * q.row_width() + q.column(grp);
  const T* w = qkw + q.weight_at(grp);
  const float r = rstd[k];
  float dot = 0;
  for (int c = lane; c < width; c += 32) dot += (load(w, c) + wofs) * load(g, base + c) * load(inp, base + c) * r;
  dot = warp_sum(dot) / float(width);
  for (int c = lane; c < width; c += 32)
    store(g, base + c, km::rmsnorm_dx(load(inp, base + c), r, load(w, c) + wofs, load(g, base + c), dot));
}

// grid (column strips of the weights, slices): partial[slice][c] = Σ x̂·dy over the slice's
// (row, user) pairs of weight column c; then added in slice order.
template <typename T>
__global__ void qk_norm_partial_kernel(float* partial, const T* g, const T* inp, const float* rstd, int64_t N,
                                       km::QkNormGroups q, int slices) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int s = blockIdx.y;
  if (c >= q.weights()) return;
  const int users = q.users(c), G = q.count();
  const int64_t rows = N * users, lo = km::slice_begin(rows, slices, s), hi = km::slice_begin(rows, slices, s + 1);
  float a = 0;
  for (int64_t r = lo; r < hi; ++r) {
    const int64_t n = r / users;
    const int u = int(r % users);
    const int64_t at = n * q.row_width() + q.user_column(c, u);
    a += load(inp, at) * rstd[n * G + q.user_group(c, u)] * load(g, at);
  }
  partial[int64_t(s) * q.weights() + c] = a;
}

__global__ void qk_norm_finish_kernel(float* dw, const float* partial, int64_t weights, int slices) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= weights) return;
  float a = 0;
  for (int s = 0; s < slices; ++s) a += partial[int64_t(s) * weights + c];
  dw[c] += a;
}

// packed [N, 3·NH·d] from fused [N, (NH + 2·NKV)·d]: one thread per packed element.
template <typename T>
__global__ void gqa_expand_kernel(T* packed, const T* fused, int64_t N, int NH, int NKV, int d) {
  const int64_t Wp = int64_t(3) * NH * d, Wf = int64_t(NH + 2 * NKV) * d, g = NH / NKV;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < N * Wp; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / Wp, c = k % Wp, part = c / (int64_t(NH) * d), h = (c / d) % NH, i = c % d;
    const int64_t src = part == 0 ? c : int64_t(NH) * d + (part - 1) * int64_t(NKV) * d + (h / g) * d + i;
    packed[k] = fused[n * Wf + src];
  }
}

// dfused from dpacked: dq copied, each kv head's gradient summed over its g query heads in
// head order (f32), as the CPU reference.
template <typename T>
__global__ void gqa_reduce_kernel(T* dfused, const T* dpacked, int64_t N, int NH, int NKV, int d) {
  const int64_t Wp = int64_t(3) * NH * d, Wf = int64_t(NH + 2 * NKV) * d, g = NH / NKV;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < N * Wf; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = k / Wf, c = k % Wf;
    const T* p = dpacked + n * Wp;
    if (c < int64_t(NH) * d) {
      dfused[k] = p[c];
      continue;
    }
    const int64_t part = 1 + (c - int64_t(NH) * d) / (int64_t(NKV) * d), j = ((c - int64_t(NH) * d) / d) % NKV,
                  i = c % d;
    float s = 0;
    for (int64_t r = 0; r < g; ++r) s += load(p, part * NH * d + (j * g + r) * d + i);
    store(dfused, k, s);
  }
}

}  // namespace

void rope_table(float* table, int64_t T, int head_dim, const RopeSpec& rope, void* stream) {
  const int64_t n = T * (head_dim / 2);
  if (n == 0) return;
  rope_table_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(table, T, head_dim, rope);
  STRATA_CUDA_CHECK_LAUNCH();
}

void rope(void* x, const float* table, const int32_t* pos, int64_t BT, int64_t T, int64_t W, int first_head, int heads,
          int head_dim, int rotary_dims, bool inverse, int dtype, void* stream) {
  const int64_t n = BT * heads * (rotary_dims / 2);
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    rope_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(x), table, pos, BT, T, W, first_head, heads, head_dim, rotary_dims, inverse ? -1.0f : 1.0f);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void qk_rmsnorm_forward(void* out, float* rstd, const void* inp, const void* qk_weight, int64_t N, int n_head,
                        int n_kv_head, int head_dim, float eps, const QkNormSpec& spec, int dtype, void* stream) {
  const km::QkNormGroups q = km::qk_norm_groups(n_head, n_kv_head, head_dim, spec);
  const int64_t rows = N * (q.count() + n_kv_head);
  if (rows == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    qk_rmsnorm_kernel<<<km::grid_for_rows(rows), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(out), rstd, static_cast<const E*>(inp), static_cast<const E*>(qk_weight), N, q,
        spec.weight_offset, eps);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void qk_rmsnorm_backward(void* dfused, float* dqk_weight, const void* inp, const void* qk_weight, const float* rstd,
                         int64_t N, int n_head, int n_kv_head, int head_dim, const QkNormSpec& spec, int dtype,
                         void* scratch, void* stream) {
  if (N == 0) return;
  const km::QkNormGroups q = km::qk_norm_groups(n_head, n_kv_head, head_dim, spec);
  // One slice count for both groups (the q heads' rows, the larger), so the scratch is one size.
  const int slices = km::column_slices(N * n_head);
  const unsigned strips = unsigned((q.weights() + km::kThreads - 1) / km::kThreads);
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    E* g = static_cast<E*>(dfused);
    const E* x = static_cast<const E*>(inp);
    // The weight's gradient first: the dx kernel overwrites dy.
    qk_norm_partial_kernel<<<dim3(strips, unsigned(slices)), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<float*>(scratch), g, x, rstd, N, q, slices);
    STRATA_CUDA_CHECK_LAUNCH();
    qk_norm_finish_kernel<<<strips, km::kThreads, 0, as_stream(stream)>>>(dqk_weight, static_cast<float*>(scratch),
                                                                          q.weights(), slices);
    STRATA_CUDA_CHECK_LAUNCH();
    qk_rmsnorm_dx_kernel<<<km::grid_for_rows(N * q.count()), km::kThreads, 0, as_stream(stream)>>>(
        g, x, static_cast<const E*>(qk_weight), rstd, N, q, spec.weight_offset);
    STRATA_CUDA_CHECK_LAUNCH();
  });
}

void gqa_expand(void* packed, const void* fused, int64_t N, int n_head, int n_kv_head, int head_dim, int dtype,
                void* stream) {
  const int64_t n = N * 3 * n_head * head_dim;
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    gqa_expand_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(packed), static_cast<const E*>(fused), N, n_head, n_kv_head, head_dim);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

void gqa_reduce(void* dfused, const void* dpacked, int64_t N, int n_head, int n_kv_head, int head_dim, int dtype,
                void* stream) {
  const int64_t n = N * (n_head + 2 * n_kv_head) * head_dim;
  if (n == 0) return;
  dispatch(dtype, [&](auto* tag) {
    using E = STRATA_ELEM(tag);
    gqa_reduce_kernel<<<km::grid_for(n), km::kThreads, 0, as_stream(stream)>>>(
        static_cast<E*>(dfused), static_cast<const E*>(dpacked), N, n_head, n_kv_head, head_dim);
  });
  STRATA_CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda::launch
