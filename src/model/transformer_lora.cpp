// The Transformer's low-rank adapters (lora.h) beside frozen weights: y = x·Wᵀ +
// s·(dropout(x)·Aᵀ)·Bᵀ with s = alpha/r, each target on its block of columns of the fused
// matmul it sits in. A's output is recomputed in backward rather than kept: r columns of the
// input's width.
#include "core/error.h"
#include "model/transformer.h"

namespace strata {

namespace {
// Dropout sites of the adapters: one per target, apart from the model's own (GPT-2's 4l+k).
constexpr uint64_t kLoraSite = uint64_t(1) << 40;
}  // namespace

void Transformer::attach_lora(std::vector<LoraTarget> targets, const LoraConfig& config, UnitParams::Own own) {
  STRATA_CHECK(storage_.frozen, "low-rank adapters on weights that are trained",
               "build the model with ModelStorage::frozen: its weights stay as they are");
  STRATA_CHECK(hooks_ || (own.params && own.grads),
               "adapters without their own parameters and no engine to provide them",
               "attach a ZeRO engine to lora(), or let the adapters keep their own");
  const size_t before = be_.budget().used(),
               want = LoraAdapters::device_bytes(targets, config.rank, int64_t(B_) * T_, dtype_, own);
  lora_ = std::make_unique<LoraAdapters>(be_, std::move(targets), config, num_units(), int64_t(B_) * T_, dtype_, own);
  // strata plan sizes runs with LoraAdapters::device_bytes: what they allocated must be exactly that.
  STRATA_CHECK(be_.budget().used() - before == want,
               "the adapters allocated " + std::to_string(be_.budget().used() - before) +
                   " device bytes but LoraAdapters::device_bytes says " + std::to_string(want),
               "this is a bug: device_bytes must mirror the constructor (strata plan relies on it)");
}

TensorView Transformer::grad_view(int i, int64_t rows) const {
  if (!storage_.frozen) return params_.grad_view(i, rows);
  const ParamSpec& s = params_.specs()[size_t(i)];
  if (s.shape.rank >= 2) return {};
  Shape shape = s.shape;
  if (rows > 0) shape.dims[0] = rows;
  return frozen_sink_.view(DType::f32, shape);
}

// f(t, column, x, dropout) for each adapter inside the matmul whose rows start at table
// index `head`, `width` output columns from inputs `inp`: its target, the first column of its
// block, and its input (the dropped copy in the adapter's scratch, under dropout).
template <typename F>
void Transformer::for_each_adapter(int head, int64_t width, TensorView inp, F&& f) {
  const int64_t in = inp.shape[inp.shape.rank - 1];
  const ParamSpec& h = params_.specs()[size_t(head)];
  const std::vector<LoraTarget>& targets = lora_->targets();
  for (int t = 0; t < int(targets.size()); ++t) {
    const LoraTarget& g = targets[size_t(t)];
    if (g.layer != h.layer || g.first_spec < head || g.in != in) continue;
    const int64_t column = (params_.offset(g.first_spec) - params_.offset(head)) / in;
    if (column + g.out > width) continue;  // a later matmul's
    const DropoutSpec d = dropout_at(float(lora_->config().dropout), kLoraSite + uint64_t(t));
    TensorView x = inp;
    if (d.active()) {  // a copy: the base's input stays undropped (backward: the same mask again)
      x = lora_->x_scratch(in);
      be_.cast(x, inp);
      be_.dropout(x, d);
    }
    f(t, column, x, d);
  }
}

bool Transformer::adapted(int head) const {
  if (!lora_) return false;
  const int layer = params_.specs()[size_t(head)].layer;
  for (const LoraTarget& g : lora_->targets())
    if (g.layer == layer && g.first_spec == head) return true;
  return false;
}

void Transformer::lora_forward(int head, TensorView out, TensorView inp) {
  if (!lora_) return;
  const float s = float(lora_->config().scaling());
  for_each_adapter(head, out.shape[out.shape.rank - 1], inp,
                   [&](int t, int64_t column, TensorView x, const DropoutSpec&) {
                     const TensorView hx = lora_->h_scratch(), y = lora_->y_scratch(lora_->targets()[size_t(t)].out);
                     be_.matmul_forward(hx, x, lora_->a(t), {});
                     be_.matmul_forward(y, hx, lora_->b(t), {});
                     be_.add_columns(out, y, column, s);
                   });
}

void Transformer::lora_backward(int head, TensorView dout, TensorView inp, TensorView dinp) {
  if (!lora_) return;
  const float s = float(lora_->config().scaling());
  for_each_adapter(head, dout.shape[dout.shape.rank - 1], inp,
                   [&](int t, int64_t column, TensorView x, const DropoutSpec& d) {
                     const TensorView hx = lora_->h_scratch(), dh = lora_->dh_scratch(),
                                      dy = lora_->y_scratch(lora_->targets()[size_t(t)].out),
                                      dx = lora_->dx_scratch(x.shape[x.shape.rank - 1]);
                     be_.matmul_forward(hx, x, lora_->a(t), {});
                     be_.take_columns(dy, dout, column, s);                           // s·dy on the target's columns
                     be_.matmul_backward(dh, lora_->db(t), {}, dy, hx, lora_->b(t));  // dB += s·dyᵀ·h; dh = s·dy·B
                     be_.matmul_backward(dx, lora_->da(t), {}, dh, x, lora_->a(t));   // dA += dhᵀ·x; dx = dh·A
                     if (d.active()) be_.dropout(dx, d);
                     be_.residual_forward(dinp, dinp, dx);
                   });
}

}  // namespace strata
