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
    ParamSpec s{std::move(name), shape, decay, GPT2Param::count, layer, unit};
    s.kind = GPT2Param(int(k));  // reused as a plain tag; llama_kind() reads it back
    out.push_back(s);
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

LlamaParam llama_kind(const ParamSpec& s) { return LlamaParam(int(s.kind)); }

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
    : be_(backend),
      cfg_(config),
      B_(micro_batch),
      T_(seq_len),
      dtype_(compute_dtype),
      storage_(storage),
      hooks_(hooks) {
  STRATA_CHECK(B_ > 0 && T_ > 0, "micro-batch " + std::to_string(B_) + " × sequence " + std::to_string(T_),
               "both must be positive");
  STRATA_CHECK(
      T_ <= cfg_.max_seq_len,
      "sequence length " + std::to_string(T_) + " exceeds the model's context " + std::to_string(cfg_.max_seq_len),
      "lower --seq-len or raise max_position_embeddings in the model config");
  STRATA_CHECK(hooks_ || (storage_.params && storage_.grads), "Llama without its own parameter or gradient buffers",
               "pass the UnitHooks that provide them");
  specs_ = llama_unit_layout(cfg_);
  entry_.assign(size_t(P::count), std::vector<int>(size_t(std::max(cfg_.n_layer, 1)), -1));
  unit_begin_.assign(size_t(num_units()) + 1, 0);
  for (size_t i = 0; i < specs_.size(); ++i) {
    offsets_.push_back(num_params_);
    entry_[size_t(llama_kind(specs_[i]))][size_t(specs_[i].layer)] = int(i);
    num_params_ += specs_[i].shape.numel();
    unit_begin_[size_t(specs_[i].unit) + 1] = num_params_;
  }
  const size_t n = size_t(num_params_);
  param_base_.assign(size_t(num_units()), nullptr);
  grad_base_.assign(size_t(num_units()), nullptr);
  if (storage_.params) {
    if (owns_master()) master_ = be_.allocate(n * 4, "params:master_f32");
    if (dtype_ != DType::f32) compute_ = be_.allocate(n * dtype_size(dtype_), "params:compute");
    char* base = static_cast<char*>(dtype_ == DType::f32 ? master_.data() : compute_.data());
    for (int u = 0; u < num_units(); ++u) param_base_[size_t(u)] = base + size_t(unit_begin(u)) * dtype_size(dtype_);
  }
  if (storage_.grads) {
    grads_ = be_.allocate(n * 4, "grads:f32");
    for (int u = 0; u < num_units(); ++u) grad_base_[size_t(u)] = grads_.as<float>() + unit_begin(u);
  }

  const LlamaActivations al = llama_activations(cfg_, B_, T_, dtype_, storage_.checkpoint, storage_.offload != nullptr);
  const ArenaLayout& lay = al.lay;
  const int64_t B = B_, T = T_;
  const bool gqa = cfg_.n_kv_head != cfg_.n_head;
  act_ = be_.allocate(lay.bytes(), "activations");
  encoded_ = lay.view(act_, al.enc);
  for (const auto& x : al.layers) {
    LayerActs la;
    TensorView* dst[14] = {&la.norm1,     &la.rstd1, &la.qkv,   &la.packed,  &la.atty, &la.lse,  &la.attproj,
                           &la.residual2, &la.norm2, &la.rstd2, &la.gate_up, &la.act,  &la.down, &la.out};
    for (size_t k = 0; k < 14; ++k)
      if (x[k] != size_t(-1)) *dst[k] = lay.view(act_, x[k]);
    if (!gqa) la.packed = la.qkv;  // q|k|v already is the fused op's layout
    layers_.push_back(la);
  }
  for (size_t i : al.ckpt) checkpoints_.push_back(lay.view(act_, i));
  normf_ = lay.view(act_, al.nf), rstdf_ = lay.view(act_, al.rf);
  logits_ = lay.view(act_, al.logits), losses_ = lay.view(act_, al.losses);
  dresidual_ = lay.view(act_, al.dres), dbtc_ = lay.view(act_, al.dbtc), dfused_ = lay.view(act_, al.df);
  dpacked_ = gqa ? lay.view(act_, al.dp) : dfused_;
  dgu_ = lay.view(act_, al.dgu), dact_ = lay.view(act_, al.dact);
  tokens_.reserve(size_t(B * T));
  zero_grad();
}

std::string Llama::describe() const {
  return "Llama " + std::to_string(cfg_.n_layer) + " layers, d=" + std::to_string(cfg_.n_embd) + ", " +
         std::to_string(cfg_.n_head) + " heads (" + std::to_string(cfg_.n_kv_head) + " kv), ffn " +
         std::to_string(cfg_.intermediate);
}

TensorView Llama::master_flat() const { return master_.view(DType::f32, {num_params_}); }
TensorView Llama::grad_flat() const { return grads_.view(DType::f32, {num_params_}); }
TensorView Llama::compute_flat() const {
  return dtype_ == DType::f32 ? TensorView{} : compute_.view(dtype_, {num_params_});
}

// Where tensor p of `layer` sits: its spec index, its element offset inside its unit and its
// shape, rows > 0 widening it to that many rows of the same width (the fused wq|wk|wv and
// w_gate|w_up, adjacent in the layout).
Llama::Slot Llama::slot(LlamaParam p, int layer, int64_t rows) const {
  const int i = entry(p, layer);
  const ParamSpec& s = specs_[size_t(i)];
  Slot out{s.unit, offsets_[size_t(i)] - unit_begin(s.unit), s.shape};
  if (rows > 0) out.shape.dims[0] = rows;
  return out;
}

TensorView Llama::pv(LlamaParam p, int layer, int64_t rows) const {
  const Slot t = slot(p, layer, rows);
  STRATA_CHECK(param_base_[size_t(t.unit)],
               "parameters of unit " + std::to_string(t.unit) + " used before they were acquired",
               "this is a bug in the engine's hooks");
  return {static_cast<char*>(param_base_[size_t(t.unit)]) + size_t(t.offset) * dtype_size(dtype_), dtype_, t.shape,
          Tier::device};
}

TensorView Llama::gv(LlamaParam p, int layer, int64_t rows) const {
  const Slot t = slot(p, layer, rows);
  STRATA_CHECK(grad_base_[size_t(t.unit)],
               "gradients of unit " + std::to_string(t.unit) + " written before they were opened",
               "this is a bug in the engine's hooks");
  return {grad_base_[size_t(t.unit)] + t.offset, DType::f32, t.shape, Tier::device};
}

void Llama::init_unit(int u, uint64_t seed, float* dst) const {
  const float std_resid = 0.02f / std::sqrt(2.0f * float(cfg_.n_layer));
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    if (s.unit != u) continue;
    float* p = dst + (offsets_[i] - unit_begin(u));
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

void Llama::init_weights(uint64_t seed) {
  STRATA_CHECK(owns_master(), "init_weights on a model without its own master parameters",
               "the ZeRO engine initialises partitioned parameters with init_unit");
  std::vector<float> unit;  // each unit made on the host, then uploaded
  for (int u = 0; u < num_units(); ++u) {
    unit.resize(size_t(unit_count(u)));
    init_unit(u, seed, unit.data());
    be_.upload(master_.as<float>() + unit_begin(u), unit.data(), unit.size() * 4);
  }
  sync_compute_params();
}

void Llama::sync_compute_params() {
  if (dtype_ != DType::f32 && owns_master()) be_.cast(compute_.view(dtype_, {num_params_}), master_flat());
}

void Llama::zero_grad() {
  if (storage_.grads) be_.fill_zero(grads_.data(), grads_.bytes(), be_.compute_stream());
}

TensorView Llama::forward_output(int l) {
  if (!storage_.checkpoint) return layers_[size_t(l)].out;
  if (!storage_.offload) return checkpoints_[size_t(l)];
  return {storage_.offload->forward_slot(l), dtype_, {B_, T_, cfg_.n_embd}, Tier::device};
}

TensorView Llama::backward_output(int l) {
  if (l < 0) return encoded_;
  if (!storage_.checkpoint) return layers_[size_t(l)].out;
  if (!storage_.offload) return checkpoints_[size_t(l)];
  return {const_cast<void*>(storage_.offload->backward_slot(l)), dtype_, {B_, T_, cfg_.n_embd}, Tier::device};
}

// Layer l from `residual` into `out`; a recompute (checkpointing) stops after SwiGLU.
void Llama::layer_forward(int l, LayerActs& a, TensorView residual, TensorView out, bool recompute) {
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

void Llama::forward(std::span<const int32_t> tokens) {
  const size_t BT = size_t(B_) * size_t(T_);
  STRATA_CHECK(tokens.size() == BT, "forward got " + std::to_string(tokens.size()) + " tokens",
               "expected micro-batch × seq-len = " + std::to_string(BT));
  tokens_.assign(tokens.begin(), tokens.end());
  const int L = cfg_.n_layer;
  if (hooks_) hooks_->begin_pass();
  acquire(0);
  be_.encoder_forward(encoded_, tokens, pv(P::embed), {});
  TensorView residual = encoded_;
  for (int l = 0; l < L; ++l) {
    acquire(1 + l);
    const TensorView out = forward_output(l);
    layer_forward(l, acts(l), residual, out, false);
    if (storage_.offload) storage_.offload->forward_done(l);
    residual = out;
  }
  acquire(L + 1);
  be_.rmsnorm_forward(normf_, rstdf_, residual, pv(P::norm), cfg_.rms_eps);
  be_.matmul_forward(logits_, normf_, pv(P::lm_head), {});
}

void Llama::backward(std::span<const int32_t> targets, float grad_scale, double* loss_sum, double loss_weight) {
  STRATA_CHECK(targets.size() == tokens_.size(), "backward got " + std::to_string(targets.size()) + " targets",
               "call forward() first with the same micro-batch size");
  int64_t valid = 0;
  for (int32_t t : targets) valid += t >= 0;
  const float dloss = valid ? grad_scale / float(valid) : 0.0f;
  be_.cross_entropy_forward_backward(losses_, logits_, targets, cfg_.vocab_size, dloss, valid ? loss_sum : nullptr,
                                     double(std::max<int64_t>(valid, 1)), loss_weight);
  const int L = cfg_.n_layer, NH = cfg_.n_head, NKV = cfg_.n_kv_head, d = cfg_.head_dim();
  const int64_t Wf = int64_t(NH + 2 * NKV) * d, I2 = 2 * int64_t(cfg_.intermediate);
  auto open = [&](int u) {
    if (hooks_) hooks_->open_grads(u);
  };
  auto close = [&](int u) {
    if (hooks_) hooks_->close_grads(u);
  };
  if (hooks_) hooks_->begin_pass();
  open(L + 1);
  acquire(L + 1);
  be_.matmul_backward(dbtc_, gv(P::lm_head), {}, logits_, normf_, pv(P::lm_head));  // logits_ holds dlogits
  be_.fill_zero(dresidual_.data, dresidual_.bytes(), be_.compute_stream());
  be_.rmsnorm_backward(dresidual_, gv(P::norm), dbtc_, backward_output(L - 1), pv(P::norm), rstdf_);
  close(L + 1);
  for (int l = L - 1; l >= 0; --l) {
    LayerActs& a = acts(l);
    const TensorView residual = backward_output(l - 1);
    open(1 + l);
    acquire(1 + l);
    if (storage_.checkpoint) layer_forward(l, a, residual, {}, true);
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
    close(1 + l);
  }
  open(0);
  be_.encoder_backward(gv(P::embed), {}, dresidual_, tokens_);
  close(0);
}

}  // namespace strata
