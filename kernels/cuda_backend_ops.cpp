// The CUDA backend's transformer ops: the views are checked against the backends' contract
// (backend/op_checks.h, the same messages as the CPU ops), then the kernels launch on the
// compute stream.
#include <algorithm>

#include "backend/op_checks.h"
#include "core/error.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_gemm.h"
#include "kernels/launch.h"
#include "kernels/launch_attention.h"
#include "kernels/math/qk_norm_math.h"
#include "kernels/math/rope_math.h"

namespace strata::cuda {

void CudaBackend::encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                                  std::span<const int32_t> positions) {
  const int64_t C = last_dim(out), N = int64_t(tokens.size()), T = out.shape[out.shape.rank - 2];
  const int64_t maxT = wpe.data ? wpe.shape[0] : T;
  expect_numel(out, N * C, "encoder_forward", "out");
  STRATA_CHECK(T <= maxT,
               "sequence length " + std::to_string(T) + " exceeds the model's context " + std::to_string(maxT),
               "lower --seq-len or use a model with a longer context");
  const int32_t* ids = stage_tokens(tokens, wte.shape[0], "token");
  const int32_t* pos = stage_records(positions, N / T, T, "encoder_forward").pos;
  launch::encoder_forward(out.data, ids, pos, wte.data, wpe.data, N, T, C, int(out.dtype), cs());
}

void CudaBackend::encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout, std::span<const int32_t> tokens,
                                   std::span<const int32_t> positions) {
  const int64_t C = last_dim(dout), N = int64_t(tokens.size()), T = dout.shape[dout.shape.rank - 2];
  expect_dtype(dwte, DType::f32, "encoder_backward", "dwte");
  const int32_t* ids = stage_tokens(tokens, dwte.shape[0], "token");
  const int32_t* pos = stage_records(positions, N / T, T, "encoder_backward").pos;
  launch::encoder_backward(dwte.as<float>(), dwpe.data ? dwpe.as<float>() : nullptr, dout.data, ids, pos, N, T, C,
                           int(dout.dtype), cs());
}

void CudaBackend::layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp, TensorView weight,
                                    TensorView bias) {
  const int64_t C = last_dim(inp), N = inp.numel() / C;
  expect_numel(out, N * C, "layernorm_forward", "out");
  expect_numel(mean, N, "layernorm_forward", "mean");
  expect_numel(rstd, N, "layernorm_forward", "rstd");
  launch::layernorm_forward(out.data, mean.as<float>(), rstd.as<float>(), inp.data, weight.data, bias.data, N, C,
                            int(out.dtype), cs());
}

void CudaBackend::layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                     TensorView inp, TensorView weight, TensorView mean, TensorView rstd) {
  const int64_t C = last_dim(inp), N = inp.numel() / C;
  expect_numel(dinp, N * C, "layernorm_backward", "dinp");
  expect_numel(dout, N * C, "layernorm_backward", "dout");
  launch::layernorm_backward(dinp.data, dweight.as<float>(), dbias.as<float>(), dout.data, inp.data, weight.data,
                             mean.as<float>(), rstd.as<float>(), N, C, int(dinp.dtype),
                             scratch(launch::norm_backward_scratch_bytes(N, C)), cs());
}

void CudaBackend::matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  const int64_t C = last_dim(inp), N = inp.numel() / C, OC = weight.shape[0];
  expect_numel(weight, OC * C, "matmul_forward", "weight");
  expect_numel(out, N * OC, "matmul_forward", "out");
  expect_dtype(weight, inp.dtype, "matmul_forward", "weight");
  // Column-major out^T[OC×N] = W[OC×C] · inp^T[C×N]: A = the row-major weight read transposed.
  const bool epilogue = !bias.empty() && bias.dtype == out.dtype;
  gemm_->run(true, false, OC, N, C, weight.data, C, inp.data, C, out.data, OC, inp.dtype, out.dtype, 0.0f,
             {epilogue ? bias.data : nullptr, nullptr}, cs());
  if (!bias.empty() && !epilogue) launch::add_bias(out.data, int(out.dtype), bias.data, int(bias.dtype), N, OC, cs());
}

void CudaBackend::matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                                      TensorView bias) {
  const int64_t C = last_dim(inp), N = inp.numel() / C, OC = weight.shape[0];
  // The fused epilogue needs the bias in the output's dtype and an aux leading dimension
  // that is a multiple of 8; anything else takes the two ops.
  if ((!bias.empty() && bias.dtype != out.dtype) || OC % 8 != 0 || out.dtype != pre.dtype)
    return Backend::matmul_gelu_forward(out, pre, inp, weight, bias);
  expect_numel(weight, OC * C, "matmul_gelu_forward", "weight");
  expect_numel(out, N * OC, "matmul_gelu_forward", "out");
  expect_numel(pre, N * OC, "matmul_gelu_forward", "pre");
  expect_dtype(weight, inp.dtype, "matmul_gelu_forward", "weight");
  gemm_->run(true, false, OC, N, C, weight.data, C, inp.data, C, out.data, OC, inp.dtype, out.dtype, 0.0f,
             {bias.empty() ? nullptr : bias.data, pre.data}, cs());
}

void CudaBackend::matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                  TensorView inp, TensorView weight) {
  const int64_t C = last_dim(inp), N = inp.numel() / C, OC = weight.shape[0];
  expect_numel(dout, N * OC, "matmul_backward", "dout");
  if (!dweight.empty()) {  // empty: a weight that is not trained
    expect_numel(dweight, OC * C, "matmul_backward", "dweight");
    expect_dtype(dweight, DType::f32, "matmul_backward", "dweight");
  }
  if (!dinp.empty()) {  // dinp^T[C×N] = W^T[C×OC] · dout^T[OC×N], overwritten
    expect_numel(dinp, N * C, "matmul_backward", "dinp");
    gemm_->run(false, false, C, N, OC, weight.data, C, dout.data, OC, dinp.data, C, dout.dtype, dinp.dtype, 0.0f, {},
               cs());
  }
  // dW^T[C×OC] += inp^T[C×N] · dout[N×OC], f32 accumulation into the f32 gradient
  if (!dweight.empty())
    gemm_->run(false, true, C, OC, N, inp.data, C, dout.data, OC, dweight.data, C, inp.dtype, DType::f32, 1.0f, {},
               cs());
  if (!dbias.empty())
    launch::column_sum(dbias.as<float>(), dout.data, N, OC, int(dout.dtype),
                       scratch(launch::column_sum_scratch_bytes(N, OC)), cs());
}

void CudaBackend::attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head, const DropoutSpec& drop,
                                    const AttentionSpec& spec, std::span<const int32_t> positions) {
  STRATA_CHECK(qkv.shape.rank == 3 && qkv.shape[2] % 3 == 0 && (qkv.shape[2] / 3) % n_head == 0,
               "attention: qkv shape " + qkv.shape.str() + " does not split into " + std::to_string(n_head) + " heads",
               "qkv must be [B, T, 3C] with C divisible by the head count");
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  expect_numel(out, B * T * C, "attention_forward", "out");
  expect_numel(lse, B * n_head * T, "attention_forward", "lse");
  const kernel_math::AttnRecords rec = stage_records(positions, B, T, "attention_forward");
  launch::attention_forward(out.data, lse.as<float>(), qkv.data, int(B), int(T), n_head, int(C / n_head),
                            int(qkv.dtype), drop, spec, rec, cs());
}

void CudaBackend::attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out, TensorView lse,
                                     int n_head, const DropoutSpec& drop, const AttentionSpec& spec,
                                     std::span<const int32_t> positions) {
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  expect_numel(dqkv, B * T * 3 * C, "attention_backward", "dqkv");
  expect_numel(dout, B * T * C, "attention_backward", "dout");
  void* ws = scratch(launch::attention_backward_scratch_bytes(int(B), int(T), n_head));
  const kernel_math::AttnRecords rec = stage_records(positions, B, T, "attention_backward");
  launch::attention_backward(dqkv.data, dout.data, qkv.data, out.data, lse.as<float>(), ws, int(B), int(T), n_head,
                             int(C / n_head), int(qkv.dtype), drop, spec, rec, cs());
}

void CudaBackend::dropout(TensorView x, const DropoutSpec& drop) {
  if (!drop.active()) return;
  STRATA_CHECK(x.shape.rank >= 2, "dropout: x has shape " + x.shape.str() + ", expected [B, T, W]",
               "this is a bug in the caller");
  const int64_t W = last_dim(x), T = x.shape.rank >= 3 ? x.shape[x.shape.rank - 2] : 1;
  launch::dropout(x.data, x.numel(), T, W, drop, int(x.dtype), cs());
}

void CudaBackend::gelu_forward(TensorView out, TensorView inp) {
  expect_numel(out, inp.numel(), "gelu_forward", "out");
  launch::gelu_forward(out.data, inp.data, inp.numel(), int(out.dtype), cs());
}

void CudaBackend::gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  expect_numel(dinp, inp.numel(), "gelu_backward", "dinp");
  expect_numel(dout, inp.numel(), "gelu_backward", "dout");
  launch::gelu_backward(dinp.data, inp.data, dout.data, inp.numel(), int(dinp.dtype), cs());
}

void CudaBackend::residual_forward(TensorView out, TensorView a, TensorView b) {
  expect_numel(a, out.numel(), "residual_forward", "a");
  expect_numel(b, out.numel(), "residual_forward", "b");
  launch::residual(out.data, a.data, b.data, out.numel(), int(out.dtype), cs());
}

void CudaBackend::scale(TensorView x, float alpha) { launch::scale(x.data, alpha, x.numel(), int(x.dtype), cs()); }

void CudaBackend::add_columns(TensorView y, TensorView x, int64_t first, float alpha) {
  const auto [N, w, W] = check_columns(y, x, first, "add_columns");
  launch::add_columns(y.data, x.data, N, w, W, first, alpha, int(y.dtype), cs());
}

void CudaBackend::take_columns(TensorView x, TensorView y, int64_t first, float alpha) {
  const auto [N, w, W] = check_columns(y, x, first, "take_columns");
  launch::take_columns(x.data, y.data, N, w, W, first, alpha, int(y.dtype), cs());
}

void CudaBackend::cross_entropy_forward_backward(TensorView losses, TensorView logits, std::span<const int32_t> targets,
                                                 int vocab, float dloss, double* loss_sum, double loss_divisor,
                                                 double loss_weight, float softcap) {
  const int64_t Vp = last_dim(logits), N = int64_t(targets.size());
  expect_dtype(logits, DType::f32, "cross_entropy", "logits");
  expect_numel(logits, N * Vp, "cross_entropy", "logits");
  expect_numel(losses, N, "cross_entropy", "losses");
  const int32_t* ids = stage_tokens(targets, vocab, "target");
  launch::cross_entropy(losses.as<float>(), logits.as<float>(), ids, N, Vp, vocab, dloss, loss_sum, loss_divisor,
                        loss_weight, softcap, cs());
}

void CudaBackend::rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                                  float weight_offset) {
  const int64_t C = last_dim(inp), N = inp.numel() / C;
  expect_numel(out, N * C, "rmsnorm_forward", "out");
  expect_numel(rstd, N, "rmsnorm_forward", "rstd");
  expect_numel(weight, C, "rmsnorm_forward", "weight");
  launch::rmsnorm_forward(out.data, rstd.as<float>(), inp.data, weight.data, weight_offset, eps, N, C, int(out.dtype),
                          cs());
}

void CudaBackend::rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                                   TensorView weight, TensorView rstd, float weight_offset) {
  const int64_t C = last_dim(inp), N = inp.numel() / C;
  expect_numel(dinp, N * C, "rmsnorm_backward", "dinp");
  expect_numel(dout, N * C, "rmsnorm_backward", "dout");
  expect_dtype(dweight, DType::f32, "rmsnorm_backward", "dweight");
  launch::rmsnorm_backward(dinp.data, dweight.as<float>(), dout.data, inp.data, weight.data, weight_offset,
                           rstd.as<float>(), N, C, int(dinp.dtype), scratch(launch::norm_backward_scratch_bytes(N, C)),
                           cs());
}

void CudaBackend::qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight, int n_head,
                                     int n_kv_head, int head_dim, float eps, const QkNormSpec& spec) {
  const kernel_math::QkNormGroups q = kernel_math::qk_norm_groups(n_head, n_kv_head, head_dim, spec);
  const int64_t W = q.row_width(), N = inp.numel() / W;
  expect_numel(inp, N * W, "qk_rmsnorm_forward", "inp");
  expect_numel(out, N * W, "qk_rmsnorm_forward", "out");
  expect_numel(rstd, N * q.count(), "qk_rmsnorm_forward", "rstd");
  expect_numel(qk_weight, q.weights(), "qk_rmsnorm_forward", "qk_weight");
  launch::qk_rmsnorm_forward(out.data, rstd.as<float>(), inp.data, qk_weight.data, N, n_head, n_kv_head, head_dim, eps,
                             spec, int(out.dtype), cs());
}

void CudaBackend::qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp, TensorView qk_weight,
                                      TensorView rstd, int n_head, int n_kv_head, int head_dim,
                                      const QkNormSpec& spec) {
  const kernel_math::QkNormGroups q = kernel_math::qk_norm_groups(n_head, n_kv_head, head_dim, spec);
  const int64_t W = q.row_width(), N = inp.numel() / W;
  expect_numel(dfused, N * W, "qk_rmsnorm_backward", "dfused");
  expect_numel(rstd, N * q.count(), "qk_rmsnorm_backward", "rstd");
  expect_dtype(dqk_weight, DType::f32, "qk_rmsnorm_backward", "dqk_weight");
  expect_numel(dqk_weight, q.weights(), "qk_rmsnorm_backward", "dqk_weight");
  launch::qk_rmsnorm_backward(dfused.data, dqk_weight.as<float>(), inp.data, qk_weight.data, rstd.as<float>(), N,
                              n_head, n_kv_head, head_dim, spec, int(dfused.dtype),
                              scratch(launch::qk_norm_scratch_bytes(N, n_head, q.weights())), cs());
}

void CudaBackend::rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& rope, bool inverse,
                       std::span<const int32_t> positions) {
  const int64_t T = x.shape[x.shape.rank - 2], W = last_dim(x), BT = x.numel() / W;
  STRATA_CHECK(head_dim % 2 == 0 && int64_t(first_head + heads) * head_dim <= W,
               "rope: heads [" + std::to_string(first_head) + ", +" + std::to_string(heads) + ") of " +
                   std::to_string(head_dim) + " in a row of " + std::to_string(W),
               "this is a bug in the model");
  const int rot = kernel_math::rope_dims(rope, head_dim);
  STRATA_CHECK(rot % 2 == 0 && rot <= head_dim,
               "rope: " + std::to_string(rot) + " rotary dims of a head of " + std::to_string(head_dim),
               "the rotary dims must be even and at most the head size");
  const int32_t* pos = stage_records(positions, BT / T, T, "rope").pos;
  launch::rope(x.data, rope_table(T, rot, rope), pos, BT, T, W, first_head, heads, head_dim, rot, inverse, int(x.dtype),
               cs());
}

void CudaBackend::gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) {
  const int64_t Wf = int64_t(n_head + 2 * n_kv_head) * head_dim, N = fused.numel() / Wf;
  expect_numel(packed, N * 3 * n_head * head_dim, "gqa_expand", "packed");
  launch::gqa_expand(packed.data, fused.data, N, n_head, n_kv_head, head_dim, int(packed.dtype), cs());
}

void CudaBackend::gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) {
  const int64_t Wf = int64_t(n_head + 2 * n_kv_head) * head_dim, N = dfused.numel() / Wf;
  expect_numel(dpacked, N * 3 * n_head * head_dim, "gqa_reduce", "dpacked");
  launch::gqa_reduce(dfused.data, dpacked.data, N, n_head, n_kv_head, head_dim, int(dfused.dtype), cs());
}

void CudaBackend::swiglu_forward(TensorView out, TensorView gate_up, GatedAct act) {
  const int64_t I = last_dim(out), N = out.numel() / I;
  expect_numel(gate_up, 2 * N * I, "swiglu_forward", "gate_up");
  launch::swiglu_forward(out.data, gate_up.data, N, I, act, int(out.dtype), cs());
}

void CudaBackend::swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout, GatedAct act) {
  const int64_t I = last_dim(dout), N = dout.numel() / I;
  expect_numel(gate_up, 2 * N * I, "swiglu_backward", "gate_up");
  expect_numel(dgate_up, 2 * N * I, "swiglu_backward", "dgate_up");
  launch::swiglu_backward(dgate_up.data, gate_up.data, dout.data, N, I, act, int(dout.dtype), cs());
}

void CudaBackend::cast(TensorView dst, TensorView src) {
  expect_numel(dst, src.numel(), "cast", "dst");
  launch::cast(dst.data, int(dst.dtype), src.data, int(src.dtype), src.numel(), cs());
}

}  // namespace strata::cuda
