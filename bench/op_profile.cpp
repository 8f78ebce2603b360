#include "bench/op_profile.h"

namespace strata::bench {

namespace {

// 2·N·OC·C for out [N, OC] = inp [N, C] · weight [OC, C]^T.
double matmul_flops(const TensorView& out, const TensorView& weight) {
  return weight.shape.rank == 2 ? 2.0 * double(out.numel()) * double(weight.shape[1]) : 0.0;
}

}  // namespace

const char* ProfilingBackend::op_name(int op) {
  static const char* const names[kOps] = {
      "fill_zero",      "convert",       "sum_squares",   "adamw",           "encoder_forward", "encoder_backward",
      "layernorm_fwd",  "layernorm_bwd", "matmul_fwd",    "matmul_gelu_fwd", "matmul_bwd",      "attention_fwd",
      "attention_bwd",  "dropout",       "gelu_fwd",      "gelu_bwd",        "residual",        "scale",
      "add_columns",    "take_columns",  "cross_entropy", "rmsnorm_fwd",     "rmsnorm_bwd",     "qk_rmsnorm_fwd",
      "qk_rmsnorm_bwd", "rope",          "gqa_expand",    "gqa_reduce",      "swiglu_fwd",      "swiglu_bwd",
      "cast",           "copy"};
  return op >= 0 && op < kOps ? names[op] : "?";
}

void ProfilingBackend::copy_async(void* dst, const void* src, size_t bytes, Stream& s) {
  timed(copy_op, 0, [&] { in_.copy_async(dst, src, bytes, s); });
}
void ProfilingBackend::fill_zero(void* dst, size_t bytes, Stream& s) {
  timed(fill_zero_op, 0, [&] { in_.fill_zero(dst, bytes, s); });
}
void ProfilingBackend::convert(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, bool accumulate,
                               Stream& s) {
  timed(convert_op, 0, [&] { in_.convert(dst, dst_t, src, src_t, n, accumulate, s); });
}
void ProfilingBackend::sum_squares(double* out, const void* x, DType t, int64_t n, bool accumulate, Stream& s) {
  timed(sum_squares_op, 0, [&] { in_.sum_squares(out, x, t, n, accumulate, s); });
}
void ProfilingBackend::adamw(const AdamWArgs& a, int32_t* nonfinite, Stream& s) {
  timed(adamw_op, 0, [&] { in_.adamw(a, nonfinite, s); });
}
void ProfilingBackend::encoder_forward(TensorView out, std::span<const int32_t> tokens, TensorView wte, TensorView wpe,
                                       std::span<const int32_t> positions) {
  timed(encoder_fwd, 0, [&] { in_.encoder_forward(out, tokens, wte, wpe, positions); });
}
void ProfilingBackend::encoder_backward(TensorView dwte, TensorView dwpe, TensorView dout,
                                        std::span<const int32_t> tokens, std::span<const int32_t> positions) {
  timed(encoder_bwd, 0, [&] { in_.encoder_backward(dwte, dwpe, dout, tokens, positions); });
}
void ProfilingBackend::layernorm_forward(TensorView out, TensorView mean, TensorView rstd, TensorView inp,
                                         TensorView weight, TensorView bias) {
  timed(layernorm_fwd, 0, [&] { in_.layernorm_forward(out, mean, rstd, inp, weight, bias); });
}
void ProfilingBackend::layernorm_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                          TensorView inp, TensorView weight, TensorView mean, TensorView rstd) {
  timed(layernorm_bwd, 0, [&] { in_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd); });
}
void ProfilingBackend::matmul_forward(TensorView out, TensorView inp, TensorView weight, TensorView bias) {
  timed(matmul_fwd, matmul_flops(out, weight), [&] { in_.matmul_forward(out, inp, weight, bias); });
}
void ProfilingBackend::matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight,
                                           TensorView bias) {
  timed(matmul_gelu_fwd, matmul_flops(out, weight), [&] { in_.matmul_gelu_forward(out, pre, inp, weight, bias); });
}
void ProfilingBackend::matmul_backward(TensorView dinp, TensorView dweight, TensorView dbias, TensorView dout,
                                       TensorView inp, TensorView weight) {
  const double f = matmul_flops(dout, weight) * (dweight.data ? 2 : 1);
  timed(matmul_bwd, f, [&] { in_.matmul_backward(dinp, dweight, dbias, dout, inp, weight); });
}
void ProfilingBackend::attention_forward(TensorView out, TensorView lse, TensorView qkv, int n_head,
                                         const DropoutSpec& drop, const AttentionSpec& spec,
                                         std::span<const int32_t> positions) {
  timed(attention_fwd, 0, [&] { in_.attention_forward(out, lse, qkv, n_head, drop, spec, positions); });
}
void ProfilingBackend::attention_backward(TensorView dqkv, TensorView dout, TensorView qkv, TensorView out,
                                          TensorView lse, int n_head, const DropoutSpec& drop,
                                          const AttentionSpec& spec, std::span<const int32_t> positions) {
  timed(attention_bwd, 0, [&] { in_.attention_backward(dqkv, dout, qkv, out, lse, n_head, drop, spec, positions); });
}
void ProfilingBackend::dropout(TensorView x, const DropoutSpec& drop) {
  timed(dropout_op, 0, [&] { in_.dropout(x, drop); });
}
void ProfilingBackend::gelu_forward(TensorView out, TensorView inp) {
  timed(gelu_fwd, 0, [&] { in_.gelu_forward(out, inp); });
}
void ProfilingBackend::gelu_backward(TensorView dinp, TensorView inp, TensorView dout) {
  timed(gelu_bwd, 0, [&] { in_.gelu_backward(dinp, inp, dout); });
}
void ProfilingBackend::residual_forward(TensorView out, TensorView a, TensorView b) {
  timed(residual_fwd, 0, [&] { in_.residual_forward(out, a, b); });
}
void ProfilingBackend::scale(TensorView x, float alpha) {
  timed(scale_op, 0, [&] { in_.scale(x, alpha); });
}
void ProfilingBackend::add_columns(TensorView y, TensorView x, int64_t first, float alpha) {
  timed(add_columns_op, 0, [&] { in_.add_columns(y, x, first, alpha); });
}
void ProfilingBackend::take_columns(TensorView x, TensorView y, int64_t first, float alpha) {
  timed(take_columns_op, 0, [&] { in_.take_columns(x, y, first, alpha); });
}
void ProfilingBackend::cross_entropy_forward_backward(TensorView losses, TensorView logits,
                                                      std::span<const int32_t> targets, int vocab, float dloss,
                                                      double* loss_sum, double loss_divisor, double loss_weight,
                                                      float softcap) {
  timed(cross_entropy, 0, [&] {
    in_.cross_entropy_forward_backward(losses, logits, targets, vocab, dloss, loss_sum, loss_divisor, loss_weight,
                                       softcap);
  });
}
void ProfilingBackend::rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView weight, float eps,
                                       float weight_offset) {
  timed(rmsnorm_fwd, 0, [&] { in_.rmsnorm_forward(out, rstd, inp, weight, eps, weight_offset); });
}
void ProfilingBackend::rmsnorm_backward(TensorView dinp, TensorView dweight, TensorView dout, TensorView inp,
                                        TensorView weight, TensorView rstd, float weight_offset) {
  timed(rmsnorm_bwd, 0, [&] { in_.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, weight_offset); });
}
void ProfilingBackend::qk_rmsnorm_forward(TensorView out, TensorView rstd, TensorView inp, TensorView qk_weight,
                                          int n_head, int n_kv_head, int head_dim, float eps, const QkNormSpec& spec) {
  timed(qk_rmsnorm_fwd, 0,
        [&] { in_.qk_rmsnorm_forward(out, rstd, inp, qk_weight, n_head, n_kv_head, head_dim, eps, spec); });
}
void ProfilingBackend::qk_rmsnorm_backward(TensorView dfused, TensorView dqk_weight, TensorView inp,
                                           TensorView qk_weight, TensorView rstd, int n_head, int n_kv_head,
                                           int head_dim, const QkNormSpec& spec) {
  timed(qk_rmsnorm_bwd, 0,
        [&] { in_.qk_rmsnorm_backward(dfused, dqk_weight, inp, qk_weight, rstd, n_head, n_kv_head, head_dim, spec); });
}
void ProfilingBackend::rope(TensorView x, int first_head, int heads, int head_dim, const RopeSpec& r, bool inverse,
                            std::span<const int32_t> positions) {
  timed(rope_op, 0, [&] { in_.rope(x, first_head, heads, head_dim, r, inverse, positions); });
}
void ProfilingBackend::gqa_expand(TensorView packed, TensorView fused, int n_head, int n_kv_head, int head_dim) {
  timed(gqa_expand_op, 0, [&] { in_.gqa_expand(packed, fused, n_head, n_kv_head, head_dim); });
}
void ProfilingBackend::gqa_reduce(TensorView dfused, TensorView dpacked, int n_head, int n_kv_head, int head_dim) {
  timed(gqa_reduce_op, 0, [&] { in_.gqa_reduce(dfused, dpacked, n_head, n_kv_head, head_dim); });
}
void ProfilingBackend::swiglu_forward(TensorView out, TensorView gate_up, GatedAct act) {
  timed(swiglu_fwd, 0, [&] { in_.swiglu_forward(out, gate_up, act); });
}
void ProfilingBackend::swiglu_backward(TensorView dgate_up, TensorView gate_up, TensorView dout, GatedAct act) {
  timed(swiglu_bwd, 0, [&] { in_.swiglu_backward(dgate_up, gate_up, dout, act); });
}
void ProfilingBackend::cast(TensorView dst, TensorView src) {
  timed(cast_op, 0, [&] { in_.cast(dst, src); });
}

}  // namespace strata::bench
