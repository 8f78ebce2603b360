#include "model/llama.h"

#include <cmath>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/rng.h"
#include "model/arena_layout.h"
#include "model/model_family.h"

namespace strata {

namespace {
using P = LlamaParam;
bool is_bias(LlamaParam k) { return k == P::bq || k == P::bk || k == P::bv || k == P::bo; }
}  // namespace

namespace {

// Where each activation lives in the arena (one allocation, sized before the model exists
// for strata plan). size_t(-1): absent (no GQA).
struct LlamaActivations {
  ArenaLayout lay;
  size_t enc;
  std::vector<std::vector<size_t>> layers;
  std::vector<size_t> ckpt;
  size_t nf, rf, logits, losses, dres, dbtc, datty, df, dp, dgu, dact, dpost;
};

LlamaActivations llama_activations(const LlamaConfig& cfg, int64_t B, int64_t T, DType a, bool checkpoint,
                                   bool offload) {
  const int64_t L = cfg.n_layer, C = cfg.n_embd, NH = cfg.n_head, Vp = cfg.padded_vocab_size;
  const int64_t d = cfg.head_dim(), I = cfg.intermediate, Q = cfg.q_dim();
  const int64_t Wf = (NH + 2 * int64_t(cfg.n_kv_head)) * d;
  const size_t absent = size_t(-1);
  const bool gqa = cfg.n_kv_head != cfg.n_head;
  const bool pre = cfg.norms != NormPlacement::post, post = cfg.norms != NormPlacement::pre;
  const DType f = DType::f32;
  LlamaActivations r;
  ArenaLayout& lay = r.lay;
  r.enc = lay.add(a, {B, T, C});
  r.layers.resize(checkpoint ? std::min<size_t>(1, size_t(L)) : size_t(L));
  for (auto& x : r.layers) {
    x = {pre ? lay.add(a, {B, T, C}) : absent,
         pre ? lay.add(f, {B, T}) : absent,
         lay.add(a, {B, T, Wf}),
         gqa ? lay.add(a, {B, T, 3 * Q}) : absent,
         lay.add(a, {B, T, Q}),
         lay.add(f, {B, NH, T}),
         lay.add(a, {B, T, C}),
         lay.add(a, {B, T, C}),
         pre ? lay.add(a, {B, T, C}) : absent,
         pre ? lay.add(f, {B, T}) : absent,
         lay.add(a, {B, T, 2 * I}),
         lay.add(a, {B, T, I}),
         lay.add(a, {B, T, C}),
         lay.add(a, {B, T, C}),
         cfg.qk_norm ? lay.add(a, {B, T, Wf}) : absent,
         cfg.qk_norm ? lay.add(f, {B, T, cfg.qk_norm_whole ? 2 : NH + cfg.n_kv_head}) : absent,
         post ? lay.add(f, {B, T}) : absent,
         post ? lay.add(f, {B, T}) : absent};
  }
  if (checkpoint && !offload)
    for (int64_t l = 0; l < L; ++l) r.ckpt.push_back(lay.add(a, {B, T, C}));
  r.nf = lay.add(a, {B, T, C}), r.rf = lay.add(f, {B, T});
  r.logits = lay.add(f, {B, T, Vp}), r.losses = lay.add(f, {B, T});
  r.dres = lay.add(a, {B, T, C}), r.dbtc = lay.add(a, {B, T, C});
  r.datty = Q != C ? lay.add(a, {B, T, Q}) : absent;  // else dbtc serves (the widths agree)
  r.df = lay.add(a, {B, T, Wf}), r.dp = gqa ? lay.add(a, {B, T, 3 * Q}) : absent, r.dgu = lay.add(a, {B, T, 2 * I}),
  r.dact = lay.add(a, {B, T, I});
  r.dpost = post ? lay.add(a, {B, T, C}) : absent;  // a post-norm's input gradient (and its output, forward)
  return r;
}

}  // namespace

size_t Llama::activation_bytes(const LlamaConfig& cfg, int micro_batch, int seq_len, DType compute_dtype,
                               bool checkpoint, bool offload) {
  return llama_activations(cfg, micro_batch, seq_len, compute_dtype, checkpoint, offload).lay.bytes();
}

Llama::Llama(Backend& backend, LlamaConfig config, int micro_batch, int seq_len, DType compute_dtype,
             ModelStorage storage, UnitHooks* hooks)
    : Transformer(backend,
                  {config.n_layer, config.n_embd, config.vocab_size, config.max_seq_len, "max_position_embeddings"},
                  llama_unit_layout(config), int(P::count), micro_batch, seq_len, compute_dtype, storage, hooks),
      cfg_(config) {
  const LlamaActivations al = llama_activations(cfg_, B_, T_, dtype_, storage_.checkpoint, storage_.offload != nullptr);
  const ArenaLayout& lay = al.lay;
  const bool gqa = cfg_.n_kv_head != cfg_.n_head;
  Buffer& act = allocate_activations(lay.bytes());
  encoded_ = lay.view(act, al.enc);
  for (const auto& x : al.layers) {
    LayerActs la;
    TensorView* dst[18] = {&la.norm1,   &la.rstd1,     &la.qkv,     &la.packed,  &la.atty,    &la.lse,
                           &la.attproj, &la.residual2, &la.norm2,   &la.rstd2,   &la.gate_up, &la.act,
                           &la.down,    &la.out,       &la.qkv_raw, &la.rstd_qk, &la.prstd1,  &la.prstd2};
    static_assert(std::size(dst) == 18);
    for (size_t k = 0; k < 18; ++k)
      if (x[k] != size_t(-1)) *dst[k] = lay.view(act, x[k]);
    if (!gqa) la.packed = la.qkv;  // q|k|v already is the fused op's layout
    layers_.push_back(la);
  }
  for (size_t i : al.ckpt) checkpoints_.push_back(lay.view(act, i));
  normf_ = lay.view(act, al.nf), rstdf_ = lay.view(act, al.rf);
  logits_ = lay.view(act, al.logits), losses_ = lay.view(act, al.losses);
  dresidual_ = lay.view(act, al.dres), dbtc_ = lay.view(act, al.dbtc), dfused_ = lay.view(act, al.df);
  datty_ = al.datty != size_t(-1) ? lay.view(act, al.datty) : dbtc_;
  dpacked_ = gqa ? lay.view(act, al.dp) : dfused_;
  dgu_ = lay.view(act, al.dgu), dact_ = lay.view(act, al.dact);
  if (al.dpost != size_t(-1)) dpost_ = lay.view(act, al.dpost);
}

std::string Llama::describe() const {
  return model_family(cfg_.family, "the model's config").display_name() + " " + std::to_string(cfg_.n_layer) +
         " layers, d=" + std::to_string(cfg_.n_embd) + ", " + std::to_string(cfg_.n_head) + " heads (" +
         std::to_string(cfg_.n_kv_head) + " kv), ffn " + std::to_string(cfg_.intermediate) +
         (cfg_.head_dim_key ? ", head_dim " + std::to_string(cfg_.head_dim()) : "") +
         (cfg_.tied ? ", tied embeddings" : "");
}

void Llama::init_unit(int u, uint64_t seed, float* dst) const {
  const float std_resid = 0.02f / std::sqrt(2.0f * float(cfg_.n_layer));
  const std::vector<ParamSpec>& specs = param_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    if (s.unit != u) continue;
    float* p = dst + (param_offset(int(i)) - unit_begin(u));
    const int64_t n = s.shape.numel();
    const LlamaParam k = llama_kind(s);
    NormalRng rng(seed, 0x4c4c000000ull + uint64_t(k) * 65536 + uint64_t(s.layer));  // one stream per tensor
    if (!s.weight_decay) {  // the norms' scales at 1 (Gemma's 1 + w: w at 0), the biases at 0
      for (int64_t j = 0; j < n; ++j) p[j] = is_bias(k) ? 0.0f : 1.0f - cfg_.norm_offset;
      continue;
    }
    const float sd = (k == P::wo || k == P::w_down) ? std_resid : 0.02f;
    for (int64_t j = 0; j < n; ++j) p[j] = sd * rng.next();
    if (k == P::embed || k == P::lm_head)  // padded vocabulary rows: never used, kept zero
      std::memset(p + int64_t(cfg_.vocab_size) * cfg_.n_embd, 0,
                  size_t(cfg_.padded_vocab_size - cfg_.vocab_size) * size_t(cfg_.n_embd) * 4);
  }
}

void Llama::embed_forward(std::span<const int32_t> tokens) {
  be_.encoder_forward(encoded_, tokens, pv(P::embed), {});
  if (cfg_.embed_scale) be_.scale(encoded_, embed_scale());
}

float Llama::embed_scale() const {
  // Gemma's normalizer: sqrt(hidden_size) as a tensor of the activations' dtype.
  const float s = std::sqrt(float(cfg_.n_embd));
  return dtype_ == DType::bf16 ? bf16_to_f32(f32_to_bf16(s)) : dtype_ == DType::f16 ? f16_to_f32(f32_to_f16(s)) : s;
}

// The norm before a sublayer (into `out`), or its input itself where the family has none.
TensorView Llama::pre_norm(TensorView out, TensorView rstd, TensorView x, P weight, int l) {
  if (cfg_.norms == NormPlacement::post) return x;
  be_.rmsnorm_forward(out, rstd, x, pv(weight, l), cfg_.rms_eps, cfg_.norm_offset);
  return out;
}

// residual + f, or residual + norm(f) where the family norms a sublayer's output.
void Llama::add_sublayer(TensorView out, TensorView residual, TensorView f, TensorView rstd, P post_weight, int l) {
  if (cfg_.norms == NormPlacement::pre) return be_.residual_forward(out, residual, f);
  be_.rmsnorm_forward(dpost_, rstd, f, pv(post_weight, l), cfg_.rms_eps, cfg_.norm_offset);  // dpost_: scratch here
  be_.residual_forward(out, residual, dpost_);
}

// Layer l from `residual` into `out`; a recompute (checkpointing) stops before the output
// (after the MLP's activation, or after its post-norm's statistics where it has one).
void Llama::layer_forward(int l, TensorView residual, TensorView out, bool recompute) {
  LayerActs& a = acts(l);
  const int NH = cfg_.n_head, NKV = cfg_.n_kv_head, d = cfg_.head_dim();
  const int64_t Wf = int64_t(NH + 2 * NKV) * d;
  const TensorView h1 = pre_norm(a.norm1, a.rstd1, residual, P::attn_norm, l);
  const TensorView qkv_bias = cfg_.qkv_bias ? pv(P::bq, l, Wf) : TensorView{};
  if (cfg_.qk_norm) {  // q and k RMS-normalised before the rotation (per head, or whole)
    be_.matmul_forward(a.qkv_raw, h1, pv(P::wq, l, Wf), qkv_bias);
    lora_forward(entry(int(P::wq), l), a.qkv_raw, h1);
    be_.qk_rmsnorm_forward(a.qkv, a.rstd_qk, a.qkv_raw, pv(P::q_norm, l, qk_norm_weights()), NH, NKV, d, cfg_.rms_eps,
                           cfg_.qk_norm_spec());
  } else {
    be_.matmul_forward(a.qkv, h1, pv(P::wq, l, Wf), qkv_bias);
    lora_forward(entry(int(P::wq), l), a.qkv, h1);
  }
  be_.rope(a.qkv, 0, NH + NKV, d, cfg_.layer_rope(l), false, positions());  // q and k heads are adjacent
  if (NKV != NH) be_.gqa_expand(a.packed, a.qkv, NH, NKV, d);
  be_.attention_forward(a.atty, a.lse, a.packed, NH, {}, cfg_.layer_attention(l), positions());
  be_.matmul_forward(a.attproj, a.atty, pv(P::wo, l), cfg_.o_bias ? pv(P::bo, l) : TensorView{});
  lora_forward(entry(int(P::wo), l), a.attproj, a.atty);
  add_sublayer(a.residual2, residual, a.attproj, a.prstd1, P::post_attn_norm, l);
  const TensorView h2 = pre_norm(a.norm2, a.rstd2, a.residual2, P::mlp_norm, l);
  be_.matmul_forward(a.gate_up, h2, pv(P::w_gate, l, 2 * int64_t(cfg_.intermediate)), {});
  lora_forward(entry(int(P::w_gate), l), a.gate_up, h2);
  be_.swiglu_forward(a.act, a.gate_up, cfg_.mlp_act);
  if (recompute && cfg_.norms == NormPlacement::pre) return;
  be_.matmul_forward(a.down, a.act, pv(P::w_down, l), {});
  lora_forward(entry(int(P::w_down), l), a.down, a.act);
  if (recompute)  // the post-norm's statistics, for its backward
    return be_.rmsnorm_forward(dpost_, a.prstd2, a.down, pv(P::post_mlp_norm, l), cfg_.rms_eps, cfg_.norm_offset);
  add_sublayer(out, a.residual2, a.down, a.prstd2, P::post_mlp_norm, l);
}

void Llama::head_forward(TensorView last) {
  be_.rmsnorm_forward(normf_, rstdf_, last, pv(P::norm), cfg_.rms_eps, cfg_.norm_offset);
  if (cfg_.tied) acquire(0);  // the tied embedding again, for the head
  be_.matmul_forward(logits_, normf_, pv(cfg_.tied ? P::embed : P::lm_head), {});
}

void Llama::head_backward(TensorView last) {
  const int L = cfg_.n_layer;
  // A tied embedding's gradient collects from the head now and the embedding at the end.
  const P head = cfg_.tied ? P::embed : P::lm_head;
  const int head_unit = cfg_.tied ? 0 : L + 1;
  open_grads(head_unit);
  acquire(head_unit);
  be_.matmul_backward(dbtc_, gv(head), {}, logits_, normf_, pv(head));  // logits_ holds dlogits
  be_.fill_zero(dresidual_.data, dresidual_.bytes(), be_.compute_stream());
  if (cfg_.tied) open_grads(L + 1), acquire(L + 1);
  be_.rmsnorm_backward(dresidual_, gv(P::norm), dbtc_, last, pv(P::norm), rstdf_, cfg_.norm_offset);
  close_grads(L + 1);
}

// The gradient into a sublayer's output f from dresidual_ (the sum's gradient): dresidual_
// itself, or through the post-norm into dpost_.
TensorView Llama::sublayer_grad(TensorView f, TensorView rstd, P post_weight, int l) {
  if (cfg_.norms == NormPlacement::pre) return dresidual_;
  be_.fill_zero(dpost_.data, dpost_.bytes(), be_.compute_stream());  // the backward adds into it
  be_.rmsnorm_backward(dpost_, gv(post_weight, l), dresidual_, f, pv(post_weight, l), rstd, cfg_.norm_offset);
  return dpost_;
}

// dresidual_ += the gradient dx of a sublayer's input x, through its pre-norm where it has one.
void Llama::add_input_grad(TensorView dx, TensorView x, TensorView rstd, P weight, int l) {
  if (cfg_.norms == NormPlacement::post) return be_.residual_forward(dresidual_, dresidual_, dx);
  be_.rmsnorm_backward(dresidual_, gv(weight, l), dx, x, pv(weight, l), rstd, cfg_.norm_offset);
}

void Llama::layer_backward(int l, TensorView residual) {
  LayerActs& a = acts(l);
  const int NH = cfg_.n_head, NKV = cfg_.n_kv_head, d = cfg_.head_dim();
  const int64_t Wf = int64_t(NH + 2 * NKV) * d, I2 = 2 * int64_t(cfg_.intermediate);
  const bool pre = cfg_.norms != NormPlacement::post;
  const TensorView ddown = sublayer_grad(a.down, a.prstd2, P::post_mlp_norm, l);
  be_.matmul_backward(dact_, gv(P::w_down, l), {}, ddown, a.act, pv(P::w_down, l));
  lora_backward(entry(int(P::w_down), l), ddown, a.act, dact_);
  be_.swiglu_backward(dgu_, a.gate_up, dact_, cfg_.mlp_act);
  be_.matmul_backward(dbtc_, gv(P::w_gate, l, I2), {}, dgu_, pre ? a.norm2 : a.residual2, pv(P::w_gate, l, I2));
  lora_backward(entry(int(P::w_gate), l), dgu_, pre ? a.norm2 : a.residual2, dbtc_);
  add_input_grad(dbtc_, a.residual2, a.rstd2, P::mlp_norm, l);
  const TensorView dattproj = sublayer_grad(a.attproj, a.prstd1, P::post_attn_norm, l);
  be_.matmul_backward(datty_, gv(P::wo, l), cfg_.o_bias ? gv(P::bo, l) : TensorView{}, dattproj, a.atty, pv(P::wo, l));
  lora_backward(entry(int(P::wo), l), dattproj, a.atty, datty_);
  be_.attention_backward(dpacked_, datty_, a.packed, a.atty, a.lse, NH, {}, cfg_.layer_attention(l), positions());
  if (NKV != NH) be_.gqa_reduce(dfused_, dpacked_, NH, NKV, d);
  be_.rope(dfused_, 0, NH + NKV, d, cfg_.layer_rope(l), true, positions());
  if (cfg_.qk_norm)
    be_.qk_rmsnorm_backward(dfused_, gv(P::q_norm, l, qk_norm_weights()), a.qkv_raw,
                            pv(P::q_norm, l, qk_norm_weights()), a.rstd_qk, NH, NKV, d, cfg_.qk_norm_spec());
  be_.matmul_backward(dbtc_, gv(P::wq, l, Wf), cfg_.qkv_bias ? gv(P::bq, l, Wf) : TensorView{}, dfused_,
                      pre ? a.norm1 : residual, pv(P::wq, l, Wf));
  lora_backward(entry(int(P::wq), l), dfused_, pre ? a.norm1 : residual, dbtc_);
  add_input_grad(dbtc_, residual, a.rstd1, P::attn_norm, l);
}

void Llama::embed_backward() {
  if (!cfg_.tied) open_grads(0);  // tied: open since the head's backward
  if (!frozen()) {                // frozen weights: nothing below the first layer learns
    if (cfg_.embed_scale) be_.scale(dresidual_, embed_scale());
    be_.encoder_backward(gv(P::embed), {}, dresidual_, tokens());
  }
  close_grads(0);
}

}  // namespace strata
