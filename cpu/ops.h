// The CPU implementations of the Backend ops (see src/backend/backend.h for the contract).
// They are also the reference every CUDA kernel is tested against.
#pragma once
#include <cstdint>
#include <span>

#include "backend/op_checks.h"
#include "core/tensor.h"
#include "cpu/workspace.h"
#include "kernels/math/dropout_math.h"
#include "kernels/math/rope_math.h"

namespace strata::cpu {

// `positions`: packed rows (Backend::encoder_forward); empty: position t.
void encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                     std::span<const int32_t> positions = {});
void encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens,
                      std::span<const int32_t> positions = {});
void layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                       TensorView bias);
void layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                        TensorView weight, TensorView mean, TensorView rstd, Workspace& ws);
void matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias, Workspace& ws);
// pre = inp · weightᵀ + bias and out = gelu(pre), the GELU in the output's own pass.
void matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight, TensorView bias,
                         Workspace& ws);
void matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout, TensorView inp,
                     TensorView weight, Workspace& ws);
// `spec`: the sliding window, scale and soft-cap; `positions`: packed rows, each record
// attended on its own (Backend::attention_forward).
void attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head, Workspace& ws,
                       const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                       std::span<const int32_t> positions = {});
void attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse, int n_head,
                        Workspace& ws, const DropoutSpec& drop = {}, const AttentionSpec& spec = {},
                        std::span<const int32_t> positions = {});
// x [B, T, W] in place times each element's dropout factor (Backend::dropout).
void dropout(TensorView x, const DropoutSpec& drop);
void gelu_forward(TensorView out, TensorView inp);
void gelu_backward(TensorView dinp, TensorView inp, TensorView dout);
void residual_forward(TensorView out, TensorView a, TensorView b);
void scale(TensorView x, float alpha);
// Column blocks of a wider activation (Backend::add_columns, take_columns).
void add_columns(TensorView y, TensorView x, int64_t first, float alpha);
void take_columns(TensorView x, TensorView y, int64_t first, float alpha);
double cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets, int vocab,
                                      float dloss, float softcap = 0.0f);
void cast(TensorView dst, TensorView src);
// Llama-family ops (ops_llama.cpp).
void rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                     float weight_offset = 0.0f);
void rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp, TensorView weight,
                      TensorView rstd, Workspace& ws, float weight_offset = 0.0f);
// The q/k RMSNorm on fused q|k|v rows (contract in src/backend/backend.h).
void qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight, int n_head,
                        int n_kv_head, int head_dim, float eps, const QkNormSpec& spec = {});
void qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp, TensorView qk_weight,
                         TensorView rstd, int n_head, int n_kv_head, int head_dim, Workspace& ws,
                         const QkNormSpec& spec = {});
void rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& rope, bool inverse,
          std::span<const int32_t> positions = {});
void gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim);
void gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim);
void swiglu_forward(TensorView out, TensorView gate_up, GatedAct act = GatedAct::silu);
void swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout, GatedAct act = GatedAct::silu);

// Calls f(T{}) with T = float, bf16 or f16 for an activation tensor's dtype.
template <typename F>
decltype(auto) dispatch_act(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::bf16:
      return f(bf16{});
    case DType::f16:
      return f(f16{});
  }
  throw_error("activations of dtype " + std::string(dtype_name(t)) + " are not supported by the CPU backend",
              "use --precision f32, bf16 or f16");
}

}  // namespace strata::cpu
