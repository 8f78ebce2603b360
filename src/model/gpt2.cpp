#include "model/gpt2.h"

#include <array>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "model/arena_layout.h"

namespace strata {

namespace {

// Where each activation lives in the arena (one allocation, sized before the model exists
// for strata plan).
struct GPT2Activations {
  ArenaLayout lay;
  size_t enc;
  std::vector<std::array<size_t, 15>> layers;
  std::vector<size_t> ckpt;
  size_t lnf, lnf_mean, lnf_rstd, logits, losses, dres, dbtc, db3, db4;
};

GPT2Activations gpt2_activations(const GPT2Config& cfg, int64_t B, int64_t T, DType a, bool checkpoint, bool offload) {
  const int64_t L = cfg.n_layer, C = cfg.n_embd, NH = cfg.n_head, Vp = cfg.padded_vocab_size;
  const DType f = DType::f32;
  GPT2Activations r;
  ArenaLayout& lay = r.lay;
  r.enc = lay.add(a, {B, T, C});
  // Checkpointing keeps one layer's activations (reused by every layer) and the layer outputs.
  r.layers.resize(checkpoint ? std::min<size_t>(1, size_t(L)) : size_t(L));
  for (auto& x : r.layers) {
    x[0] = lay.add(a, {B, T, C});       // ln1
    x[1] = lay.add(f, {B, T});          // ln1_mean
    x[2] = lay.add(f, {B, T});          // ln1_rstd
    x[3] = lay.add(a, {B, T, 3 * C});   // qkv
    x[4] = lay.add(a, {B, T, C});       // atty
    x[5] = lay.add(f, {B, NH, T});      // lse
    x[6] = lay.add(a, {B, T, C});       // attproj
    x[7] = lay.add(a, {B, T, C});       // residual2
    x[8] = lay.add(a, {B, T, C});       // ln2
    x[9] = lay.add(f, {B, T});          // ln2_mean
    x[10] = lay.add(f, {B, T});         // ln2_rstd
    x[11] = lay.add(a, {B, T, 4 * C});  // fch
    x[12] = lay.add(a, {B, T, 4 * C});  // fch_gelu
    x[13] = lay.add(a, {B, T, C});      // fcproj
    x[14] = lay.add(a, {B, T, C});      // residual3
  }
  if (checkpoint && !offload)
    for (int64_t l = 0; l < L; ++l) r.ckpt.push_back(lay.add(a, {B, T, C}));
  r.lnf = lay.add(a, {B, T, C}), r.lnf_mean = lay.add(f, {B, T}), r.lnf_rstd = lay.add(f, {B, T});
  r.logits = lay.add(f, {B, T, Vp}), r.losses = lay.add(f, {B, T});
  r.dres = lay.add(a, {B, T, C}), r.dbtc = lay.add(a, {B, T, C}), r.db3 = lay.add(a, {B, T, 3 * C}),
  r.db4 = lay.add(a, {B, T, 4 * C});
  return r;
}

}  // namespace

size_t GPT2::activation_bytes(const GPT2Config& cfg, int micro_batch, int seq_len, DType compute_dtype, bool checkpoint,
                              bool offload) {
  return gpt2_activations(cfg, micro_batch, seq_len, compute_dtype, checkpoint, offload).lay.bytes();
}

GPT2::GPT2(Backend& backend, GPT2Config config, int micro_batch, int seq_len, DType compute_dtype, GPT2Storage storage,
           UnitHooks* hooks)
    : Transformer(backend, {config.n_layer, config.n_embd, config.vocab_size, config.max_seq_len, "n_positions"},
                  gpt2_unit_layout(config), int(GPT2Param::count), micro_batch, seq_len, compute_dtype, storage, hooks),
      cfg_(config) {
  // f16 activations overflow past 65504; fp16 runs pair them with loss scaling.
  const GPT2Activations al = gpt2_activations(cfg_, B_, T_, dtype_, storage_.checkpoint, storage_.offload != nullptr);
  const ArenaLayout& lay = al.lay;
  Buffer& act = allocate_activations(lay.bytes());
  encoded_ = lay.view(act, al.enc);
  for (const auto& x : al.layers) {
    LayerActs la;
    TensorView* dst[15] = {&la.ln1,      &la.ln1_mean, &la.ln1_rstd,  &la.qkv,    &la.atty,
                           &la.lse,      &la.attproj,  &la.residual2, &la.ln2,    &la.ln2_mean,
                           &la.ln2_rstd, &la.fch,      &la.fch_gelu,  &la.fcproj, &la.residual3};
    for (int k = 0; k < 15; ++k) *dst[k] = lay.view(act, x[size_t(k)]);
    layers_.push_back(la);
  }
  for (size_t i : al.ckpt) checkpoints_.push_back(lay.view(act, i));
  lnf_ = lay.view(act, al.lnf), lnf_mean_ = lay.view(act, al.lnf_mean), lnf_rstd_ = lay.view(act, al.lnf_rstd);
  logits_ = lay.view(act, al.logits), losses_ = lay.view(act, al.losses);
  dresidual_ = lay.view(act, al.dres), dl_btc_ = lay.view(act, al.dbtc);
  dl_bt3c_ = lay.view(act, al.db3), dl_bt4c_ = lay.view(act, al.db4);
}

void GPT2::init_unit(int u, uint64_t seed, float* dst) const {
  const float std_resid = 0.02f / std::sqrt(2.0f * float(cfg_.n_layer));
  const std::vector<ParamSpec>& specs = param_specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    if (s.unit != u) continue;
    float* p = dst + (param_offset(int(i)) - unit_begin(u));
    const int64_t n = s.shape.numel();
    // One stream per (tensor kind, layer): values do not depend on the layout or the others.
    NormalRng rng(seed, uint64_t(s.kind) * 65536 + uint64_t(s.layer));
    const GPT2Param k = gpt2_kind(s);
    if (k == GPT2Param::ln1w || k == GPT2Param::ln2w || k == GPT2Param::lnfw) {
      for (int64_t j = 0; j < n; ++j) p[j] = 1.0f;
    } else if (!s.weight_decay) {
      std::memset(p, 0, size_t(n) * 4);
    } else {
      const float sd = (k == GPT2Param::attprojw || k == GPT2Param::fcprojw) ? std_resid : 0.02f;
      for (int64_t j = 0; j < n; ++j) p[j] = sd * rng.next();
      if (k == GPT2Param::wte)  // padded vocabulary rows never receive gradient; keep them zero
        std::memset(p + int64_t(cfg_.vocab_size) * cfg_.n_embd, 0,
                    size_t(cfg_.padded_vocab_size - cfg_.vocab_size) * size_t(cfg_.n_embd) * 4);
    }
  }
}

std::string GPT2::describe() const {
  return "GPT-2 " + std::to_string(cfg_.n_layer) + " layers, d=" + std::to_string(cfg_.n_embd) + ", " +
         std::to_string(cfg_.n_head) + " heads" +
         (cfg_.embd_pdrop > 0 || cfg_.attn_pdrop > 0 || cfg_.resid_pdrop > 0
              ? ", dropout " + std::to_string(cfg_.embd_pdrop).substr(0, 4) + "/" +
                    std::to_string(cfg_.attn_pdrop).substr(0, 4) + "/" + std::to_string(cfg_.resid_pdrop).substr(0, 4) +
                    " (embd/attn/resid)"
              : "");
}

// Calls f(offset in this layout, offset in llm.c's order, count) for every per-layer
// slice of every tensor: the two orders hold the same slices, differently arranged.
template <typename F>
void GPT2::for_each_llmc_slice(F&& f) const {
  size_t at = 0;
  for (const ParamSpec& s : gpt2_param_specs(cfg_)) {
    const bool stacked = gpt2_kind(s) >= GPT2Param::ln1w && gpt2_kind(s) <= GPT2Param::fcprojb;
    const int layers = stacked ? cfg_.n_layer : 1;
    const int64_t per = s.shape.numel() / layers;
    for (int l = 0; l < layers; ++l, at += size_t(per)) f(param_offset(entry(s.kind, l)), at, size_t(per));
  }
}

void GPT2::import_llmc_params(std::span<const float> llmc) {
  STRATA_CHECK(
      owns_master() && llmc.size() == size_t(num_params()),
      "import of " + std::to_string(llmc.size()) + " parameters into a model of " + std::to_string(num_params()),
      "the file was written for a different model shape");
  std::vector<float> mine_order(llmc.size());  // rearranged on the host, uploaded at once
  for_each_llmc_slice([&](int64_t mine, size_t theirs, size_t n) {
    std::memcpy(mine_order.data() + mine, llmc.data() + theirs, n * 4);
  });
  be_.upload(master_flat().data, mine_order.data(), mine_order.size() * 4);
  sync_compute_params();
}

void GPT2::export_llmc_grads(std::span<float> llmc) const {
  STRATA_CHECK(owns_grads() && llmc.size() == size_t(num_params()),
               "export of gradients into " + std::to_string(llmc.size()) + " elements",
               "the destination must hold every parameter");
  std::vector<float> grads(llmc.size());
  be_.download(grads.data(), grad_flat().data, grads.size() * 4);
  for_each_llmc_slice(
      [&](int64_t mine, size_t theirs, size_t n) { std::memcpy(llmc.data() + theirs, grads.data() + mine, n * 4); });
}

void GPT2::embed_forward(std::span<const int32_t> tokens) {
  be_.encoder_forward(encoded_, tokens, pv(GPT2Param::wte), pv(GPT2Param::wpe), positions());
  be_.dropout(encoded_, drop(cfg_.embd_pdrop, kEmbedSite));
}

TensorView GPT2::dropped_grad(TensorView into, float p, uint64_t site) {
  const DropoutSpec d = drop(p, site);
  if (!d.active()) return dresidual_;  // dresidual_ itself: it also flows on down the skip path
  TensorView g{into.data, dresidual_.dtype, dresidual_.shape, into.tier};
  be_.cast(g, dresidual_);
  be_.dropout(g, d);
  return g;
}

// Layer l from its input `residual` into `out`. A recompute (checkpointing, in backward)
// stops at the GELU: backward needs every activation up to there, not the layer's output.
void GPT2::layer_forward(int l, TensorView residual, TensorView out, bool recompute) {
  using P = GPT2Param;
  LayerActs& a = acts(l);
  const int NH = cfg_.n_head;
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, pv(P::ln1w, l), pv(P::ln1b, l));
  be_.matmul_forward(a.qkv, a.ln1, pv(P::qkvw, l), pv(P::qkvb, l));
  lora_forward(entry(int(P::qkvw), l), a.qkv, a.ln1);
  const uint64_t site = 4 * uint64_t(l);
  be_.attention_forward(a.atty, a.lse, a.qkv, NH, drop(cfg_.attn_pdrop, site), {}, positions());
  be_.matmul_forward(a.attproj, a.atty, pv(P::attprojw, l), pv(P::attprojb, l));
  lora_forward(entry(int(P::attprojw), l), a.attproj, a.atty);
  be_.dropout(a.attproj, drop(cfg_.resid_pdrop, site + 1));
  be_.residual_forward(a.residual2, residual, a.attproj);
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, pv(P::ln2w, l), pv(P::ln2b, l));
  if (adapted(entry(int(P::fcw), l))) {  // an adapter on c_fc adds before the GELU: the matmul without its epilogue
    be_.matmul_forward(a.fch, a.ln2, pv(P::fcw, l), pv(P::fcb, l));
    lora_forward(entry(int(P::fcw), l), a.fch, a.ln2);
    be_.gelu_forward(a.fch_gelu, a.fch);
  } else {
    be_.matmul_gelu_forward(a.fch_gelu, a.fch, a.ln2, pv(P::fcw, l), pv(P::fcb, l));
  }
  if (recompute) return;
  be_.matmul_forward(a.fcproj, a.fch_gelu, pv(P::fcprojw, l), pv(P::fcprojb, l));
  lora_forward(entry(int(P::fcprojw), l), a.fcproj, a.fch_gelu);
  be_.dropout(a.fcproj, drop(cfg_.resid_pdrop, site + 2));
  be_.residual_forward(out, a.residual2, a.fcproj);
}

void GPT2::head_forward(TensorView last) {
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, last, pv(GPT2Param::lnfw), pv(GPT2Param::lnfb));
  acquire(0);  // the tied embedding again, for the LM head
  be_.matmul_forward(logits_, lnf_, pv(GPT2Param::wte), {});
}

void GPT2::head_backward(TensorView last) {
  using P = GPT2Param;
  const int L = cfg_.n_layer;
  // The embeddings' gradients collect from the LM head now and the encoder at the end.
  open_grads(0);
  acquire(0);
  be_.matmul_backward(dl_btc_, gv(P::wte), {}, logits_, lnf_, pv(P::wte));  // logits_ holds dlogits
  be_.fill_zero(dresidual_.data, dresidual_.bytes(), be_.compute_stream());
  open_grads(L + 1);
  acquire(L + 1);
  be_.layernorm_backward(dresidual_, gv(P::lnfw), gv(P::lnfb), dl_btc_, last, pv(P::lnfw), lnf_mean_, lnf_rstd_);
  close_grads(L + 1);
}

void GPT2::layer_backward(int l, TensorView residual) {
  using P = GPT2Param;
  LayerActs& a = acts(l);
  const int NH = cfg_.n_head;
  const uint64_t site = 4 * uint64_t(l);
  // dl_btc_ is free until the MLP's up-projection writes it, dl_bt4c_ after its backward.
  const TensorView dfcproj = dropped_grad(dl_btc_, cfg_.resid_pdrop, site + 2);
  be_.matmul_backward(dl_bt4c_, gv(P::fcprojw, l), gv(P::fcprojb, l), dfcproj, a.fch_gelu, pv(P::fcprojw, l));
  lora_backward(entry(int(P::fcprojw), l), dfcproj, a.fch_gelu, dl_bt4c_);
  be_.gelu_backward(dl_bt4c_, a.fch, dl_bt4c_);
  be_.matmul_backward(dl_btc_, gv(P::fcw, l), gv(P::fcb, l), dl_bt4c_, a.ln2, pv(P::fcw, l));
  lora_backward(entry(int(P::fcw), l), dl_bt4c_, a.ln2, dl_btc_);
  be_.layernorm_backward(dresidual_, gv(P::ln2w, l), gv(P::ln2b, l), dl_btc_, a.residual2, pv(P::ln2w, l), a.ln2_mean,
                         a.ln2_rstd);
  const TensorView dattproj = dropped_grad(dl_bt4c_, cfg_.resid_pdrop, site + 1);
  be_.matmul_backward(dl_btc_, gv(P::attprojw, l), gv(P::attprojb, l), dattproj, a.atty, pv(P::attprojw, l));
  lora_backward(entry(int(P::attprojw), l), dattproj, a.atty, dl_btc_);
  be_.attention_backward(dl_bt3c_, dl_btc_, a.qkv, a.atty, a.lse, NH, drop(cfg_.attn_pdrop, site), {}, positions());
  be_.matmul_backward(dl_btc_, gv(P::qkvw, l), gv(P::qkvb, l), dl_bt3c_, a.ln1, pv(P::qkvw, l));
  lora_backward(entry(int(P::qkvw), l), dl_bt3c_, a.ln1, dl_btc_);
  be_.layernorm_backward(dresidual_, gv(P::ln1w, l), gv(P::ln1b, l), dl_btc_, residual, pv(P::ln1w, l), a.ln1_mean,
                         a.ln1_rstd);
}

void GPT2::embed_backward() {
  if (!frozen()) {                                               // frozen weights: nothing below the first layer learns
    be_.dropout(dresidual_, drop(cfg_.embd_pdrop, kEmbedSite));  // its last use: masked in place
    be_.encoder_backward(gv(GPT2Param::wte), gv(GPT2Param::wpe), dresidual_, tokens(), positions());
  }
  close_grads(0);
}

}  // namespace strata
