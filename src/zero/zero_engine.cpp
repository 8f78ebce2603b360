#include "zero/zero_engine.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace strata::zero {

StagePolicy StagePolicy::for_stage(int stage) {
  STRATA_CHECK(stage >= 0 && stage <= 3, "--zero-stage " + std::to_string(stage), "stages are 0, 1, 2 and 3");
  return {stage >= 1, stage >= 2, stage >= 3};
}

namespace {
int rank_of(Communicator* c) { return c ? c->rank() : 0; }
int world_of(Communicator* c) { return c ? c->size() : 1; }
}  // namespace

ZeroEngine::ZeroEngine(Backend& backend, Communicator* comm, int stage, int64_t sub_group_size, ModelBuffers model,
                       AdamWConfig adam)
    : be_(backend),
      comm_(comm),
      stage_(stage),
      rank_(rank_of(comm)),
      world_(world_of(comm)),
      policy_(StagePolicy::for_stage(stage)),
      model_(std::move(model)),
      layout_(model_.params, world_, sub_group_size),
      adam_(backend, policy_.optimizer_states ? layout_.shard_elements() : layout_.model_elements(), adam) {
  STRATA_CHECK(!policy_.gradients,
               "--zero-stage " + std::to_string(stage) + " is understood but not implemented yet (gradient and parameter "
               "partitioning land next)",
               "use --zero-stage 0 or 1");
  STRATA_CHECK(model_.weight_decay.size() == model_.params.size(), "ZeroEngine: one weight-decay flag per parameter",
               "this is a bug in the caller");
  if (!policy_.optimizer_states) {
    for (size_t i = 0; i < model_.params.size(); ++i)
      groups_.push_back({model_.params[i].offset, model_.params[i].count, bool(model_.weight_decay[i])});
    return;
  }
  // Stage 1: this rank's shard of master weights, gradients (and the bf16 copy-out), plus
  // one padded buffer for the collectives. Padding is zero and stays zero under AdamW.
  const size_t shard = size_t(layout_.shard_elements()), padded = size_t(layout_.padded_elements());
  padded_ = be_.allocate(padded * 4, "zero:padded_f32");
  shard_grads_ = be_.allocate(shard * 4, "zero:grad_shard");
  shard_master_ = be_.allocate(shard * 4, "zero:master_shard");
  std::memset(padded_.data(), 0, padded_.bytes());
  pack(model_.master, padded_.as<float>());
  for (size_t g = 0; g < layout_.sub_groups().size(); ++g)
    std::memcpy(shard_master_.as<float>() + layout_.shard_offset(int(g)),
                padded_.as<float>() + layout_.slice_begin(int(g), rank_), size_t(layout_.sub_groups()[g].shard) * 4);
  if (model_.compute) {
    shard_compute_ = be_.allocate(shard * dtype_size(model_.compute_dtype), "zero:compute_shard");
    padded_compute_ = be_.allocate(padded * dtype_size(model_.compute_dtype), "zero:padded_compute");
    std::memset(padded_compute_.data(), 0, padded_compute_.bytes());
  }
  for (const OwnedPiece& piece : layout_.owned_pieces(rank_))
    groups_.push_back({piece.shard_offset, piece.count, bool(model_.weight_decay[size_t(piece.param)])});
}

void ZeroEngine::pack(const float* full, float* padded) const {
  for (const SubGroup& g : layout_.sub_groups())
    std::memcpy(padded + g.storage_offset, full + g.flat_begin, size_t(g.count) * 4);
}

template <typename T>
void ZeroEngine::unpack_typed(const T* padded, T* full) const {
  for (const SubGroup& g : layout_.sub_groups())
    std::memcpy(full + g.flat_begin, padded + g.storage_offset, size_t(g.count) * sizeof(T));
}

void ZeroEngine::unpack(const float* padded, float* full) const { unpack_typed(padded, full); }

double ZeroEngine::reduce_gradients() {
  const int64_t n = layout_.model_elements();
  if (!policy_.optimizer_states) {
    if (comm_ && world_ > 1) comm_->all_reduce(std::span<float>(model_.grads, size_t(n)));
    return std::sqrt(be_.sum_squares({model_.grads, DType::f32, {n}, Tier::device}));
  }
  float* padded = padded_.as<float>();
  pack(model_.grads, padded);
  for (size_t g = 0; g < layout_.sub_groups().size(); ++g) {
    const SubGroup& s = layout_.sub_groups()[g];
    float* out = shard_grads_.as<float>() + layout_.shard_offset(int(g));
    if (comm_ && world_ > 1)
      comm_->reduce_scatter(std::span<const float>(padded + s.storage_offset, size_t(s.padded)),
                            std::span<float>(out, size_t(s.shard)));
    else
      std::memcpy(out, padded + s.storage_offset, size_t(s.shard) * 4);
  }
  double sq = be_.sum_squares({shard_grads_.data(), DType::f32, {layout_.shard_elements()}, Tier::device});
  if (comm_ && world_ > 1) comm_->all_reduce(std::span<double>(&sq, 1));
  return std::sqrt(sq);
}

bool ZeroEngine::step(float lr, float clip_scale, int64_t t) {
  if (!policy_.optimizer_states)
    return adam_.step(model_.master, model_.grads, model_.compute, model_.compute_dtype, groups_, lr, clip_scale, t);
  const bool nonfinite = adam_.step(shard_master_.as<float>(), shard_grads_.as<float>(),
                                    model_.compute ? shard_compute_.data() : nullptr, model_.compute_dtype, groups_, lr,
                                    clip_scale, t);
  // Every rank's full parameters become current: gather the shards (the bf16 copy-out in
  // mixed precision, the f32 parameters otherwise).
  for (size_t g = 0; g < layout_.sub_groups().size(); ++g) {
    const SubGroup& s = layout_.sub_groups()[g];
    const int64_t off = layout_.shard_offset(int(g));
    if (model_.compute) {
      auto* src = static_cast<uint16_t*>(shard_compute_.data()) + off;
      auto* dst = static_cast<uint16_t*>(padded_compute_.data()) + s.storage_offset;
      if (comm_ && world_ > 1)
        comm_->all_gather(std::span<const uint16_t>(src, size_t(s.shard)), std::span<uint16_t>(dst, size_t(s.padded)));
      else
        std::memcpy(dst, src, size_t(s.shard) * 2);
    } else {
      const float* src = shard_master_.as<float>() + off;
      float* dst = padded_.as<float>() + s.storage_offset;
      if (comm_ && world_ > 1)
        comm_->all_gather(std::span<const float>(src, size_t(s.shard)), std::span<float>(dst, size_t(s.padded)));
      else
        std::memcpy(dst, src, size_t(s.shard) * 4);
    }
  }
  if (model_.compute)
    unpack_typed(static_cast<const uint16_t*>(padded_compute_.data()), static_cast<uint16_t*>(model_.compute));
  else
    unpack(padded_.as<float>(), model_.master);
  return nonfinite;
}

size_t ZeroEngine::optimizer_state_bytes() const {
  return adam_.state_bytes() + shard_master_.bytes();
}

}  // namespace strata::zero
