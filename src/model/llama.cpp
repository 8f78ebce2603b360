#include "model/llama.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "model/arena_layout.h"

namespace strata {

namespace {
using P = LlamaParam;
struct Named {
  LlamaParam kind;
  const char* name;
};
constexpr Named kLayer[] = {
    {P::attn_norm, "attn_norm"}, {P::wq, "wq"},         {P::wk, "wk"},     {P::wv, "wv"},        {P::wo, "wo"},
    {P::mlp_norm, "mlp_norm"},   {P::w_gate, "w_gate"}, {P::w_up, "w_up"}, {P::w_down, "w_down"}};
}  // namespace

std::vector<ParamSpec> llama_unit_layout(const LlamaConfig& c) {
  const int64_t C = c.n_embd, d = c.head_dim(), I = c.intermediate, Vp = c.padded_vocab_size;
  const int64_t q = int64_t(c.n_head) * d, kv = int64_t(c.n_kv_head) * d;
  std::vector<ParamSpec> out;
  auto add = [&](std::string name, Shape shape, bool decay, LlamaParam k, int layer, int unit) {
    out.push_back({std::move(name), shape, decay, int(k), layer, unit});
  };
  add("embed", {Vp, C}, true, P::embed, 0, 0);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "h" + std::to_string(l) + ".";
    const Shape shapes[] = {{C}, {q, C}, {kv, C}, {kv, C}, {C, q}, {C}, {I, C}, {I, C}, {C, I}};
    for (size_t i = 0; i < std::size(kLayer); ++i)
      add(h + kLayer[i].name, shapes[i], shapes[i].rank == 2, kLayer[i].kind, l, 1 + l);
  }
  add("norm", {C}, false, P::norm, 0, c.n_layer + 1);
  add("lm_head", {Vp, C}, true, P::lm_head, 0, c.n_layer + 1);
  return out;
}

LlamaParam llama_kind(const ParamSpec& s) { return LlamaParam(s.kind); }

namespace {

// Where each activation lives in the arena (one allocation, sized before the model exists
// for strata plan). size_t(-1): absent (no GQA).
struct LlamaActivations {
  ArenaLayout lay;
  size_t enc;
  std::vector<std::vector<size_t>> layers;
  std::vector<size_t> ckpt;
  size_t nf, rf, logits, losses, dres, dbtc, df, dp, dgu, dact;
};

LlamaActivations llama_activations(const LlamaConfig& cfg, int64_t B, int64_t T, DType a, bool checkpoint,
                                   bool offload) {
  const int64_t L = cfg.n_layer, C = cfg.n_embd, NH = cfg.n_head, Vp = cfg.padded_vocab_size;
  const int64_t d = cfg.head_dim(), I = cfg.intermediate;
  const int64_t Wf = (NH + 2 * int64_t(cfg.n_kv_head)) * d;
  const bool gqa = cfg.n_kv_head != cfg.n_head;
  const DType f = DType::f32;
  LlamaActivations r;
  ArenaLayout& lay = r.lay;
  r.enc = lay.add(a, {B, T, C});
  r.layers.resize(checkpoint ? std::min<size_t>(1, size_t(L)) : size_t(L));
  for (auto& x : r.layers) {
    x = {lay.add(a, {B, T, C}),     lay.add(f, {B, T}),
         lay.add(a, {B, T, Wf}),    gqa ? lay.add(a, {B, T, 3 * C}) : size_t(-1),
         lay.add(a, {B, T, C}),     lay.add(f, {B, NH, T}),
         lay.add(a, {B, T, C}),     lay.add(a, {B, T, C}),
         lay.add(a, {B, T, C}),     lay.add(f, {B, T}),
         lay.add(a, {B, T, 2 * I}), lay.add(a, {B, T, I}),
         lay.add(a, {B, T, C}),     lay.add(a, {B, T, C})};
  }
  if (checkpoint && !offload)
    for (int64_t l = 0; l < L; ++l) r.ckpt.push_back(lay.add(a, {B, T, C}));
  r.nf = lay.add(a, {B, T, C}), r.rf = lay.add(f, {B, T});
  r.logits = lay.add(f, {B, T, Vp}), r.losses = lay.add(f, {B, T});
  r.dres = lay.add(a, {B, T, C}), r.dbtc = lay.add(a, {B, T, C}), r.df = lay.add(a, {B, T, Wf}),
  r.dp = gqa ? lay.add(a, {B, T, 3 * C}) : size_t(-1), r.dgu = lay.add(a, {B, T, 2 * I}),
  r.dact = lay.add(a, {B, T, I});
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
    TensorView* dst[14] = {&la.norm1,     &la.rstd1, &la.qkv,   &la.packed,  &la.atty, &la.lse,  &la.attproj,
                           &la.residual2, &la.norm2, &la.rstd2, &la.gate_up, &la.act,  &la.down, &la.out};
    for (size_t k = 0; k < 14; ++k)
      if (x[k] != size_t(-1)) *dst[k] = lay.view(act, x[k]);
    if (!gqa) la.packed = la.qkv;  // q|k|v already is the fused op's layout
    layers_.push_back(la);
  }
  for (size_t i : al.ckpt) checkpoints_.push_back(lay.view(act, i));
  normf_ = lay.view(act, al.nf), rstdf_ = lay.view(act, al.rf);
  logits_ = lay.view(act, al.logits), losses_ = lay.view(act, al.losses);
  dresidual_ = lay.view(act, al.dres), dbtc_ = lay.view(act, al.dbtc), dfused_ = lay.view(act, al.df);
  dpacked_ = gqa ? lay.view(act, al.dp) : dfused_;
  dgu_ = lay.view(act, al.dgu), dact_ = lay.view(act, al.dact);
}

std::string Llama::describe() const {
  return "Llama " + std::to_string(cfg_.n_layer) + " layers, d=" + std::to_string(cfg_.n_embd) + ", " +
         std::to_string(cfg_.n_head) + " heads (" + std::to_string(cfg_.n_kv_head) + " kv), ffn " +
         std::to_string(cfg_.intermediate);
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
    if (!s.weight_decay) {                                                           // the norms
      for (int64_t j = 0; j < n; ++j) p[j] = 1.0f;
      continue;
    }
    const float sd = (k == P::wo || k == P::w_down) ? std_resid : 0.02f;
    for (int64_t j = 0; j < n; ++j) p[j] = sd * rng.next();
    if (k == P::embed || k == P::lm_head)  // padded vocabulary rows: never used, kept zero
      std::memset(p + int64_t(cfg_.vocab_size) * cfg_.n_embd, 0,
                  size_t(cfg_.padded_vocab_size - cfg_.vocab_size) * size_t(cfg_.n_embd) * 4);
  }
}

void Llama::embed_forward(std::span<const int32_t> tokens) { be_.encoder_forward(encoded_, tokens, pv(P::embed), {}); }

// Layer l from `residual` into `out`; a recompute (checkpointing) stops after SwiGLU.
void Llama::layer_forward(int l, TensorView residual, TensorView out, bool recompute) {
  LayerActs& a = acts(l);
  const int NH = cfg_.n_head, NKV = cfg_.n_kv_head, d = cfg_.head_dim();
  const int64_t Wf = int64_t(NH + 2 * NKV) * d;
  be_.rmsnorm_forward(a.norm1, a.rstd1, residual, pv(P::attn_norm, l), cfg_.rms_eps);
  be_.matmul_forward(a.qkv, a.norm1, pv(P::wq, l, Wf), {});
  be_.rope(a.qkv, 0, NH + NKV, d, cfg_.rope_theta, false);  // q and k heads are adjacent
  if (NKV != NH) be_.gqa_expand(a.packed, a.qkv, NH, NKV, d);
  be_.attention_forward(a.atty, a.lse, a.packed, NH);
  be_.matmul_forward(a.attproj, a.atty, pv(P::wo, l), {});
  be_.residual_forward(a.residual2, residual, a.attproj);
  be_.rmsnorm_forward(a.norm2, a.rstd2, a.residual2, pv(P::mlp_norm, l), cfg_.rms_eps);
  be_.matmul_forward(a.gate_up, a.norm2, pv(P::w_gate, l, 2 * int64_t(cfg_.intermediate)), {});
  be_.swiglu_forward(a.act, a.gate_up);
  if (recompute) return;
  be_.matmul_forward(a.down, a.act, pv(P::w_down, l), {});
  be_.residual_forward(out, a.residual2, a.down);
}

void Llama::head_forward(TensorView last) {
  be_.rmsnorm_forward(normf_, rstdf_, last, pv(P::norm), cfg_.rms_eps);
  be_.matmul_forward(logits_, normf_, pv(P::lm_head), {});
}

void Llama::head_backward(TensorView last) {
  const int L = cfg_.n_layer;
  open_grads(L + 1);
  acquire(L + 1);
  be_.matmul_backward(dbtc_, gv(P::lm_head), {}, logits_, normf_, pv(P::lm_head));  // logits_ holds dlogits
  be_.fill_zero(dresidual_.data, dresidual_.bytes(), be_.compute_stream());
  be_.rmsnorm_backward(dresidual_, gv(P::norm), dbtc_, last, pv(P::norm), rstdf_);
  close_grads(L + 1);
}

void Llama::layer_backward(int l, TensorView residual) {
  LayerActs& a = acts(l);
  const int NH = cfg_.n_head, NKV = cfg_.n_kv_head, d = cfg_.head_dim();
  const int64_t Wf = int64_t(NH + 2 * NKV) * d, I2 = 2 * int64_t(cfg_.intermediate);
  be_.matmul_backward(dact_, gv(P::w_down, l), {}, dresidual_, a.act, pv(P::w_down, l));
  be_.swiglu_backward(dgu_, a.gate_up, dact_);
  be_.matmul_backward(dbtc_, gv(P::w_gate, l, I2), {}, dgu_, a.norm2, pv(P::w_gate, l, I2));
  be_.rmsnorm_backward(dresidual_, gv(P::mlp_norm, l), dbtc_, a.residual2, pv(P::mlp_norm, l), a.rstd2);
  be_.matmul_backward(dbtc_, gv(P::wo, l), {}, dresidual_, a.atty, pv(P::wo, l));
  be_.attention_backward(dpacked_, dbtc_, a.packed, a.atty, a.lse, NH);
  if (NKV != NH) be_.gqa_reduce(dfused_, dpacked_, NH, NKV, d);
  be_.rope(dfused_, 0, NH + NKV, d, cfg_.rope_theta, true);
  be_.matmul_backward(dbtc_, gv(P::wq, l, Wf), {}, dfused_, a.norm1, pv(P::wq, l, Wf));
  be_.rmsnorm_backward(dresidual_, gv(P::attn_norm, l), dbtc_, residual, pv(P::attn_norm, l), a.rstd1);
}

void Llama::embed_backward() {
  open_grads(0);
  be_.encoder_backward(gv(P::embed), {}, dresidual_, tokens());
  close_grads(0);
}

}  // namespace strata
