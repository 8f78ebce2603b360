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
      "lower --seq-len or raise n_positions in the model config");
  // f16 activations overflow past 65504; fp16 runs pair them with loss scaling (S3).
  STRATA_CHECK(hooks_ || (storage_.params && storage_.grads), "GPT2 without its own parameter or gradient buffers",
               "pass the UnitHooks that provide them");
  specs_ = gpt2_unit_layout(cfg_);
  entry_.assign(size_t(GPT2Param::count), std::vector<int>(size_t(std::max(cfg_.n_layer, 1)), -1));
  unit_begin_.assign(size_t(num_units()) + 1, 0);
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    offsets_.push_back(num_params_);
    entry_[size_t(s.kind)][size_t(s.layer)] = int(i);
    num_params_ += s.shape.numel();
    unit_begin_[size_t(s.unit) + 1] = num_params_;
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

  const GPT2Activations al = gpt2_activations(cfg_, B_, T_, dtype_, storage_.checkpoint, storage_.offload != nullptr);
  const ArenaLayout& lay = al.lay;
  const int64_t B = B_, T = T_;
  act_ = be_.allocate(lay.bytes(), "activations");
  encoded_ = lay.view(act_, al.enc);
  for (const auto& x : al.layers) {
    LayerActs la;
    TensorView* dst[15] = {&la.ln1,      &la.ln1_mean, &la.ln1_rstd,  &la.qkv,    &la.atty,
                           &la.lse,      &la.attproj,  &la.residual2, &la.ln2,    &la.ln2_mean,
                           &la.ln2_rstd, &la.fch,      &la.fch_gelu,  &la.fcproj, &la.residual3};
    for (int k = 0; k < 15; ++k) *dst[k] = lay.view(act_, x[size_t(k)]);
    layers_.push_back(la);
  }
  for (size_t i : al.ckpt) checkpoints_.push_back(lay.view(act_, i));
  lnf_ = lay.view(act_, al.lnf), lnf_mean_ = lay.view(act_, al.lnf_mean), lnf_rstd_ = lay.view(act_, al.lnf_rstd);
  logits_ = lay.view(act_, al.logits), losses_ = lay.view(act_, al.losses);
  dresidual_ = lay.view(act_, al.dres), dl_btc_ = lay.view(act_, al.dbtc);
  dl_bt3c_ = lay.view(act_, al.db3), dl_bt4c_ = lay.view(act_, al.db4);
  tokens_.reserve(size_t(B * T));
  zero_grad();
}

TensorView GPT2::master(int i) const {
  return master_.view(DType::f32, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * 4);
}
TensorView GPT2::grad(int i) const {
  return grads_.view(DType::f32, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * 4);
}
TensorView GPT2::param(int i) const {
  if (dtype_ == DType::f32) return master(i);
  return compute_.view(dtype_, specs_[size_t(i)].shape, size_t(offsets_[size_t(i)]) * dtype_size(dtype_));
}
TensorView GPT2::master_flat() const { return master_.view(DType::f32, {num_params_}); }
TensorView GPT2::grad_flat() const { return grads_.view(DType::f32, {num_params_}); }
TensorView GPT2::compute_flat() const {
  return dtype_ == DType::f32 ? TensorView{} : compute_.view(dtype_, {num_params_});
}

TensorView GPT2::pv(GPT2Param p, int layer) const {
  const int i = entry(p, layer);
  const int u = specs_[size_t(i)].unit;
  STRATA_CHECK(param_base_[size_t(u)], "parameters of unit " + std::to_string(u) + " used before they were acquired",
               "this is a bug in the engine's hooks");
  return {static_cast<char*>(param_base_[size_t(u)]) + size_t(offsets_[size_t(i)] - unit_begin(u)) * dtype_size(dtype_),
          dtype_, specs_[size_t(i)].shape, Tier::device};
}

TensorView GPT2::gv(GPT2Param p, int layer) const {
  const int i = entry(p, layer);
  const int u = specs_[size_t(i)].unit;
  STRATA_CHECK(grad_base_[size_t(u)], "gradients of unit " + std::to_string(u) + " written before they were opened",
               "this is a bug in the engine's hooks");
  return {grad_base_[size_t(u)] + (offsets_[size_t(i)] - unit_begin(u)), DType::f32, specs_[size_t(i)].shape,
          Tier::device};
}

void GPT2::init_unit(int u, uint64_t seed, float* dst) const {
  const float std_resid = 0.02f / std::sqrt(2.0f * float(cfg_.n_layer));
  for (size_t i = 0; i < specs_.size(); ++i) {
    const ParamSpec& s = specs_[i];
    if (s.unit != u) continue;
    float* p = dst + (offsets_[i] - unit_begin(u));
    const int64_t n = s.shape.numel();
    // One stream per (tensor kind, layer): values do not depend on the layout or the others.
    NormalRng rng(seed, uint64_t(s.kind) * 65536 + uint64_t(s.layer));
    const GPT2Param k = s.kind;
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
         std::to_string(cfg_.n_head) + " heads";
}

void GPT2::init_weights(uint64_t seed) {
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

// Calls f(offset in this layout, offset in llm.c's order, count) for every per-layer
// slice of every tensor: the two orders hold the same slices, differently arranged.
template <typename F>
static void for_each_llmc_slice(const GPT2Config& cfg, const std::vector<std::vector<int>>& entry,
                                const std::vector<int64_t>& offsets, F&& f) {
  size_t at = 0;
  for (const ParamSpec& s : gpt2_param_specs(cfg)) {
    const bool stacked = s.kind >= GPT2Param::ln1w && s.kind <= GPT2Param::fcprojb;
    const int layers = stacked ? cfg.n_layer : 1;
    const int64_t per = s.shape.numel() / layers;
    for (int l = 0; l < layers; ++l, at += size_t(per))
      f(offsets[size_t(entry[size_t(s.kind)][size_t(l)])], at, size_t(per));
  }
}

void GPT2::import_llmc_params(std::span<const float> llmc) {
  STRATA_CHECK(
      owns_master() && llmc.size() == size_t(num_params_),
      "import of " + std::to_string(llmc.size()) + " parameters into a model of " + std::to_string(num_params_),
      "the file was written for a different model shape");
  std::vector<float> mine_order(llmc.size());  // rearranged on the host, uploaded at once
  for_each_llmc_slice(cfg_, entry_, offsets_, [&](int64_t mine, size_t theirs, size_t n) {
    std::memcpy(mine_order.data() + mine, llmc.data() + theirs, n * 4);
  });
  be_.upload(master_.data(), mine_order.data(), mine_order.size() * 4);
  sync_compute_params();
}

void GPT2::export_llmc_grads(std::span<float> llmc) const {
  STRATA_CHECK(storage_.grads && llmc.size() == size_t(num_params_),
               "export of gradients into " + std::to_string(llmc.size()) + " elements",
               "the destination must hold every parameter");
  std::vector<float> grads(llmc.size());
  be_.download(grads.data(), grads_.data(), grads.size() * 4);
  for_each_llmc_slice(cfg_, entry_, offsets_, [&](int64_t mine, size_t theirs, size_t n) {
    std::memcpy(llmc.data() + theirs, grads.data() + mine, n * 4);
  });
}

void GPT2::sync_compute_params() {
  if (dtype_ != DType::f32 && owns_master()) be_.cast(compute_.view(dtype_, {num_params_}), master_flat());
}

void GPT2::zero_grad() {
  if (storage_.grads) be_.fill_zero(grads_.data(), grads_.bytes(), be_.compute_stream());
}

TensorView GPT2::forward_output(int l) {
  if (!storage_.checkpoint) return layers_[size_t(l)].residual3;
  if (!storage_.offload) return checkpoints_[size_t(l)];
  return {storage_.offload->forward_slot(l), dtype_, {B_, T_, cfg_.n_embd}, Tier::device};
}

TensorView GPT2::backward_output(int l) {
  if (l < 0) return encoded_;
  if (!storage_.checkpoint) return layers_[size_t(l)].residual3;
  if (!storage_.offload) return checkpoints_[size_t(l)];
  return {const_cast<void*>(storage_.offload->backward_slot(l)), dtype_, {B_, T_, cfg_.n_embd}, Tier::device};
}

// Layer l from its input `residual` into `out`. A recompute (checkpointing, in backward)
// stops at the GELU: backward needs every activation up to there, not the layer's output.
void GPT2::layer_forward(int l, LayerActs& a, TensorView residual, TensorView out, bool recompute) {
  using P = GPT2Param;
  const int NH = cfg_.n_head;
  be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, pv(P::ln1w, l), pv(P::ln1b, l));
  be_.matmul_forward(a.qkv, a.ln1, pv(P::qkvw, l), pv(P::qkvb, l));
  be_.attention_forward(a.atty, a.lse, a.qkv, NH);
  be_.matmul_forward(a.attproj, a.atty, pv(P::attprojw, l), pv(P::attprojb, l));
  be_.residual_forward(a.residual2, residual, a.attproj);
  be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, pv(P::ln2w, l), pv(P::ln2b, l));
  be_.matmul_forward(a.fch, a.ln2, pv(P::fcw, l), pv(P::fcb, l));
  be_.gelu_forward(a.fch_gelu, a.fch);
  if (recompute) return;
  be_.matmul_forward(a.fcproj, a.fch_gelu, pv(P::fcprojw, l), pv(P::fcprojb, l));
  be_.residual_forward(out, a.residual2, a.fcproj);
}

void GPT2::forward(std::span<const int32_t> tokens) {
  const size_t BT = size_t(B_) * size_t(T_);
  STRATA_CHECK(tokens.size() == BT, "forward got " + std::to_string(tokens.size()) + " tokens",
               "expected micro-batch × seq-len = " + std::to_string(BT));
  tokens_.assign(tokens.begin(), tokens.end());
  const int L = cfg_.n_layer;
  using P = GPT2Param;
  begin_pass();
  acquire(0);
  be_.encoder_forward(encoded_, tokens, pv(P::wte), pv(P::wpe));
  TensorView residual = encoded_;
  for (int l = 0; l < L; ++l) {
    acquire(1 + l);
    const TensorView out = forward_output(l);
    layer_forward(l, acts(l), residual, out, false);
    if (storage_.offload) storage_.offload->forward_done(l);
    residual = out;
  }
  acquire(L + 1);
  be_.layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, residual, pv(P::lnfw), pv(P::lnfb));
  acquire(0);  // the tied embedding again, for the LM head
  be_.matmul_forward(logits_, lnf_, pv(P::wte), {});
}

void GPT2::backward(std::span<const int32_t> targets, float grad_scale, double* loss_sum, double loss_weight) {
  STRATA_CHECK(targets.size() == tokens_.size(), "backward got " + std::to_string(targets.size()) + " targets",
               "call forward() first with the same micro-batch size");
  int64_t valid = 0;
  for (int32_t t : targets) valid += t >= 0;
  const float dloss = valid ? grad_scale / float(valid) : 0.0f;
  be_.cross_entropy_forward_backward(losses_, logits_, targets, cfg_.vocab_size, dloss, valid ? loss_sum : nullptr,
                                     double(std::max<int64_t>(valid, 1)), loss_weight);
  using P = GPT2Param;
  const int L = cfg_.n_layer, NH = cfg_.n_head;
  // The embeddings' gradients collect from the LM head now and the encoder at the end.
  begin_pass();
  open_grads(0);
  acquire(0);
  be_.matmul_backward(dl_btc_, gv(P::wte), {}, logits_, lnf_, pv(P::wte));  // logits_ holds dlogits
  be_.fill_zero(dresidual_.data, dresidual_.bytes(), be_.compute_stream());
  open_grads(L + 1);
  acquire(L + 1);
  be_.layernorm_backward(dresidual_, gv(P::lnfw), gv(P::lnfb), dl_btc_, backward_output(L - 1), pv(P::lnfw), lnf_mean_,
                         lnf_rstd_);
  close_grads(L + 1);
  for (int l = L - 1; l >= 0; --l) {
    LayerActs& a = acts(l);
    const TensorView residual = backward_output(l - 1);
    open_grads(1 + l);
    acquire(1 + l);
    if (storage_.checkpoint) layer_forward(l, a, residual, {}, true);
    be_.matmul_backward(dl_bt4c_, gv(P::fcprojw, l), gv(P::fcprojb, l), dresidual_, a.fch_gelu, pv(P::fcprojw, l));
    be_.gelu_backward(dl_bt4c_, a.fch, dl_bt4c_);
    be_.matmul_backward(dl_btc_, gv(P::fcw, l), gv(P::fcb, l), dl_bt4c_, a.ln2, pv(P::fcw, l));
    be_.layernorm_backward(dresidual_, gv(P::ln2w, l), gv(P::ln2b, l), dl_btc_, a.residual2, pv(P::ln2w, l), a.ln2_mean,
                           a.ln2_rstd);
    be_.matmul_backward(dl_btc_, gv(P::attprojw, l), gv(P::attprojb, l), dresidual_, a.atty, pv(P::attprojw, l));
    be_.attention_backward(dl_bt3c_, dl_btc_, a.qkv, a.atty, a.lse, NH);
    be_.matmul_backward(dl_btc_, gv(P::qkvw, l), gv(P::qkvb, l), dl_bt3c_, a.ln1, pv(P::qkvw, l));
    be_.layernorm_backward(dresidual_, gv(P::ln1w, l), gv(P::ln1b, l), dl_btc_, residual, pv(P::ln1w, l), a.ln1_mean,
                           a.ln1_rstd);
    close_grads(1 + l);
  }
  be_.encoder_backward(gv(P::wte), gv(P::wpe), dresidual_, tokens_);
  close_grads(0);
}

}  // namespace strata
