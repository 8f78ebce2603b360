// Raw-pointer kernel launchers (implemented in *.cu). dtype codes follow strata::DType:
// 0 = f32, 1 = bf16, 2 = f16. `stream` is a cudaStream_t. Callers go through the CUDA
// backend (cuda_backend.cpp), which checks the views against the CPU contract first.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/math/dropout_math.h"
#include "kernels/math/rope_math.h"
#include "kernels/math/scratch_sizes.h"

namespace strata::cuda::launch {

// ---- elementwise.cu ----
void residual(void* out, const void* a, const void* b, int64_t n, int dtype, void* stream);
// x *= alpha (Backend::scale)
void scale(void* x, float alpha, int64_t n, int dtype, void* stream);
// y[n, first + j] = scaled_add(y, alpha, x[n, j]) for x [N, w], y [N, W] (Backend::add_columns);
// take_columns: x[n, j] = alpha · y[n, first + j].
void add_columns(void* y, const void* x, int64_t N, int64_t w, int64_t W, int64_t first, float alpha, int dtype,
                 void* stream);
void take_columns(void* x, const void* y, int64_t N, int64_t w, int64_t W, int64_t first, float alpha, int dtype,
                  void* stream);
void cast(void* dst, int dst_dtype, const void* src, int src_dtype, int64_t n, void* stream);
// dst = round(dst + src), src f32 (the engine's bucket output into a gradient shard).
void accumulate(void* dst, int dst_dtype, const float* src, int64_t n, void* stream);
void gelu_forward(void* out, const void* inp, int64_t n, int dtype, void* stream);
// x [n elements, rows of W, T rows per sample] in place times each element's dropout factor.
void dropout(void* x, int64_t n, int64_t T, int64_t W, const DropoutSpec& drop, int dtype, void* stream);
void gelu_backward(void* dinp, const void* inp, const void* dout, int64_t n, int dtype, void* stream);
// The gated MLP (Backend::swiglu_*): act(gate)·up, SiLU or tanh GELU.
void swiglu_forward(void* out, const void* gate_up, int64_t N, int64_t I, GatedAct act, int dtype, void* stream);
void swiglu_backward(void* dgate_up, const void* gate_up, const void* dout, int64_t N, int64_t I, GatedAct act,
                     int dtype, void* stream);
// out[n, c] += bias[c] (bias in bias_dtype), for matmuls whose epilogue cannot take the bias.
void add_bias(void* out, int out_dtype, const void* bias, int bias_dtype, int64_t N, int64_t C, void* stream);

// ---- llama.cu ----
// cos/sin table [T, head_dim/2, 2] f32, built once per shape on the device.
void rope_table(float* table, int64_t T, int head_dim, const RopeSpec& rope, void* stream);
// Heads of head_dim, their leading rotary_dims rotating; the table is for rotary_dims.
// `pos`: packed rows' positions [BT] on the device (null: row index mod T).
void rope(void* x, const float* table, const int32_t* pos, int64_t BT, int64_t T, int64_t W, int first_head, int heads,
          int head_dim, int rotary_dims, bool inverse, int dtype, void* stream);
// The q/k RMSNorm (Backend::qk_rmsnorm_*; its groups: kernels/math/qk_norm_math.h); the
// backward needs qk_norm_scratch_bytes of scratch.
void qk_rmsnorm_forward(void* out, float* rstd, const void* inp, const void* qk_weight, int64_t N, int n_head,
                        int n_kv_head, int head_dim, float eps, const QkNormSpec& spec, int dtype, void* stream);
using kernel_math::qk_norm_scratch_bytes;
void qk_rmsnorm_backward(void* dfused, float* dqk_weight, const void* inp, const void* qk_weight, const float* rstd,
                         int64_t N, int n_head, int n_kv_head, int head_dim, const QkNormSpec& spec, int dtype,
                         void* scratch, void* stream);
void gqa_expand(void* packed, const void* fused, int64_t N, int n_head, int n_kv_head, int head_dim, int dtype,
                void* stream);
void gqa_reduce(void* dfused, const void* dpacked, int64_t N, int n_head, int n_kv_head, int head_dim, int dtype,
                void* stream);

// ---- embed_loss.cu ----
// `pos`: packed rows' positions [N] on the device (null: row index mod T).
void encoder_forward(void* out, const int32_t* tokens, const int32_t* pos, const void* wte, const void* wpe, int64_t N,
                     int64_t T, int64_t C, int dtype, void* stream);
void encoder_backward(float* dwte, float* dwpe, const void* dout, const int32_t* tokens, const int32_t* pos, int64_t N,
                      int64_t T, int64_t C, int dtype, void* stream);
// losses[n], logits overwritten with the gradient; *loss_sum += Σ losses / divisor · weight
// (one block adds the rows in order: deterministic). softcap > 0: of the capped logits.
void cross_entropy(float* losses, float* logits, const int32_t* targets, int64_t N, int64_t Vp, int vocab, float dloss,
                   double* loss_sum, double loss_divisor, double loss_weight, float softcap, void* stream);

// ---- norms.cu ----
void layernorm_forward(void* out, float* mean, float* rstd, const void* inp, const void* weight, const void* bias,
                       int64_t N, int64_t C, int dtype, void* stream);
// scratch: norm_backward_scratch_bytes(N, C) of device memory.
void layernorm_backward(void* dinp, float* dweight, float* dbias, const void* dout, const void* inp, const void* weight,
                        const float* mean, const float* rstd, int64_t N, int64_t C, int dtype, void* scratch,
                        void* stream);
// The scale is weight + weight_offset (Gemma's norms: 1 + w).
void rmsnorm_forward(void* out, float* rstd, const void* inp, const void* weight, float weight_offset, float eps,
                     int64_t N, int64_t C, int dtype, void* stream);
void rmsnorm_backward(void* dinp, float* dweight, const void* dout, const void* inp, const void* weight,
                      float weight_offset, const float* rstd, int64_t N, int64_t C, int dtype, void* scratch,
                      void* stream);
using kernel_math::norm_backward_scratch_bytes;
// dbias[c] += Σ_n dout[n, c]; scratch: column_sum_scratch_bytes(N, C).
void column_sum(float* dbias, const void* dout, int64_t N, int64_t C, int dtype, void* scratch, void* stream);
using kernel_math::column_sum_scratch_bytes;

// ---- optimizer.cu ----
// *out (+)= Σ x² in f64; scratch: square_sum_scratch_bytes() (the chunks' partials).
void sum_squares(double* out, const void* x, int dtype, int64_t n, bool accumulate, void* scratch, void* stream);
using kernel_math::square_sum_scratch_bytes;
struct AdamLaunch {
  float* param;
  float* m;
  float* v;
  const void* grad;
  int grad_dtype;
  void* param_out;  // may be null
  int out_dtype;
  int64_t n;
  float beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, inv_sqrt_bc2, eps, decay_mul, grad_scale;
  // 16-bit states: m and v in bf16 (instead of m, v) and the master in bf16 (instead of
  // param), any of them, rounded as kernels/math/adam16_math.h says.
  uint16_t* m16 = nullptr;
  uint16_t* v16 = nullptr;
  uint16_t* param16 = nullptr;
  bool stochastic = true;
  uint32_t key_lo = 0, key_hi = 0, key_p = 0;
  int64_t index_base = 0;
};
void adamw(const AdamLaunch& a, int32_t* nonfinite, void* stream);

}  // namespace strata::cuda::launch
