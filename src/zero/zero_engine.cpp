#include "zero/zero_engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace strata::zero {

StagePolicy StagePolicy::for_stage(int stage) {
  STRATA_CHECK(stage >= 0 && stage <= 3, "--zero-stage " + std::to_string(stage), "stages are 0, 1, 2 and 3");
  return {stage >= 1, stage >= 2, stage >= 3};
}

ZeroEngine::ZeroEngine(Backend& backend, Communicator* comm, int stage, int64_t sub_group_size, AdamWConfig adam)
    : be_(backend),
      comm_(comm),
      stage_(stage),
      rank_(comm ? comm->rank() : 0),
      world_(comm ? comm->size() : 1),
      sub_group_size_(sub_group_size),
      policy_(StagePolicy::for_stage(stage)),
      adam_cfg_(adam) {}

void ZeroEngine::attach(UnitModel& model, ModelBuffers buffers, uint64_t seed) {
  model_ = &model;
  buf_ = std::move(buffers);
  STRATA_CHECK(buf_.weight_decay.size() == buf_.params.size(), "ZeroEngine: one weight-decay flag per parameter",
               "this is a bug in the caller");
  STRATA_CHECK(policy_.optimizer_states || buf_.master,
               "ZeroEngine: stage " + std::to_string(stage_) + " needs the model's parameters",
               "this is a bug in the caller");
  STRATA_CHECK(policy_.gradients || buf_.grads,
               "ZeroEngine: stage " + std::to_string(stage_) + " needs the model's gradients",
               "this is a bug in the caller");
  layout_ = std::make_unique<PartitionLayout>(buf_.params, world_, sub_group_size_);
  const PartitionLayout& lay = *layout_;
  adam_ =
      std::make_unique<AdamW>(be_, policy_.optimizer_states ? lay.shard_elements() : lay.model_elements(), adam_cfg_);
  if (!policy_.optimizer_states) {
    for (size_t i = 0; i < buf_.params.size(); ++i)
      groups_.push_back({buf_.params[i].offset, buf_.params[i].count, bool(buf_.weight_decay[i])});
    return;
  }
  for (const OwnedPiece& piece : lay.owned_pieces(rank_))
    groups_.push_back({piece.shard_offset, piece.count, bool(buf_.weight_decay[size_t(piece.param)])});
  unit_groups_.assign(size_t(model.num_units()), {});
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) unit_groups_[size_t(lay.sub_groups()[g].unit)].push_back(int(g));

  // This rank's shards. Padding is zero and stays zero under AdamW.
  const size_t shard = size_t(lay.shard_elements()), padded = size_t(lay.padded_elements());
  const size_t esz = dtype_size(buf_.compute_dtype);
  const bool low_precision = buf_.compute_dtype != DType::f32;
  shard_grads_ = be_.allocate(shard * 4, "zero:grad_shard");
  shard_master_ = be_.allocate(shard * 4, "zero:master_shard");
  std::memset(shard_grads_.data(), 0, shard_grads_.bytes());
  std::memset(shard_master_.data(), 0, shard_master_.bytes());
  if (low_precision) shard_compute_ = be_.allocate(shard * esz, "zero:compute_shard");
  int64_t max_unit = 0, max_other = 0, max_padded = 0;
  for (int u = 0; u < model.num_units(); ++u) {
    max_unit = std::max(max_unit, model.unit_count(u));
    if (u > 0) max_other = std::max(max_other, model.unit_count(u));
  }
  for (const SubGroup& g : lay.sub_groups()) max_padded = std::max(max_padded, g.padded);
  if (!policy_.gradients || !policy_.parameters) {
    // Stages 1-2 gather the updated shards into the full parameters through one padded buffer.
    padded_ = be_.allocate(padded * 4, "zero:padded_f32");
    std::memset(padded_.data(), 0, padded_.bytes());
    if (low_precision) {
      padded_compute_ = be_.allocate(padded * esz, "zero:padded_compute");
      std::memset(padded_compute_.data(), 0, padded_compute_.bytes());
    }
  }
  if (policy_.gradients) {
    staging_ = be_.allocate(size_t(max_padded) * std::max<size_t>(4, esz), "zero:staging");
    staging_out_ = be_.allocate(size_t(max_padded) * 4, "zero:staging_out");
    bucket_[0] = be_.allocate(size_t(model.unit_count(0)) * 4, "zero:grad_bucket_embeddings");
    bucket_[1] = be_.allocate(size_t(std::max<int64_t>(max_other, 1)) * 4, "zero:grad_bucket");
  }
  if (policy_.parameters) {
    gathered_[0] = be_.allocate(size_t(model.unit_count(0)) * esz, "zero:params_embeddings");
    gathered_[1] = be_.allocate(size_t(std::max<int64_t>(max_other, 1)) * esz, "zero:params_unit");
  }
  // Initial master shard: from the model's full parameters, or unit by unit.
  if (buf_.master) {
    pack(buf_.master, padded_.as<float>());
    for (size_t g = 0; g < lay.sub_groups().size(); ++g)
      std::memcpy(shard_master_.as<float>() + lay.shard_offset(int(g)),
                  padded_.as<float>() + lay.slice_begin(int(g), rank_), size_t(lay.sub_groups()[g].shard) * 4);
  } else {
    std::vector<float> unit(static_cast<size_t>(max_unit));  // one unit at a time, never the whole model
    for (int u = 0; u < model.num_units(); ++u) {
      model.init_unit(u, seed, unit.data());
      for (int gi : unit_groups_[size_t(u)]) {
        const SubGroup& g = lay.sub_groups()[size_t(gi)];
        const int64_t lo = std::min(g.count, int64_t(rank_) * g.shard),
                      hi = std::min(g.count, int64_t(rank_ + 1) * g.shard);
        if (hi > lo)
          std::memcpy(shard_master_.as<float>() + lay.shard_offset(gi),
                      unit.data() + (g.flat_begin - model.unit_begin(u)) + lo, size_t(hi - lo) * 4);
      }
    }
  }
  if (low_precision)
    be_.cast({shard_compute_.data(), buf_.compute_dtype, {int64_t(shard)}, Tier::device},
             {shard_master_.data(), DType::f32, {int64_t(shard)}, Tier::device});
  if (!buf_.master && !policy_.parameters) publish_params();  // fill the model's bf16 copy
}

void ZeroEngine::pack(const float* full, float* padded) const {
  for (const SubGroup& g : layout_->sub_groups())
    std::memcpy(padded + g.storage_offset, full + g.flat_begin, size_t(g.count) * 4);
}

template <typename T>
void ZeroEngine::unpack(const T* padded, T* full) const {
  for (const SubGroup& g : layout_->sub_groups())
    std::memcpy(full + g.flat_begin, padded + g.storage_offset, size_t(g.count) * sizeof(T));
}

template <typename T>
void ZeroEngine::gather_group(const SubGroup& g, int64_t shard_off, const T* shard, T* padded_out) {
  if (distributed())
    comm_->all_gather(std::span<const T>(shard + shard_off, size_t(g.shard)),
                      std::span<T>(padded_out, size_t(g.padded)));
  else
    std::memcpy(padded_out, shard + shard_off, size_t(g.shard) * sizeof(T));
}

void ZeroEngine::begin_step() {
  if (policy_.gradients) std::memset(shard_grads_.data(), 0, shard_grads_.bytes());
}

void ZeroEngine::open_grads(int unit) {
  Buffer& b = bucket_[bucket_of(unit)];
  std::memset(b.data(), 0, size_t(model_->unit_count(unit)) * 4);
  model_->set_unit_grads(unit, b.as<float>());
}

void ZeroEngine::close_grads(int unit) {
  const PartitionLayout& lay = *layout_;
  const float* bucket = bucket_[bucket_of(unit)].as<float>();
  float* staging = staging_.as<float>();
  float* out = staging_out_.as<float>();
  for (int gi : unit_groups_[size_t(unit)]) {
    const SubGroup& g = lay.sub_groups()[size_t(gi)];
    std::memcpy(staging, bucket + (g.flat_begin - model_->unit_begin(unit)), size_t(g.count) * 4);
    std::memset(staging + g.count, 0, size_t(g.padded - g.count) * 4);
    if (distributed())
      comm_->reduce_scatter(std::span<const float>(staging, size_t(g.padded)), std::span<float>(out, size_t(g.shard)));
    else
      std::memcpy(out, staging, size_t(g.shard) * 4);
    float* acc = shard_grads_.as<float>() + lay.shard_offset(gi);  // accumulate over micro-batches
    for (int64_t i = 0; i < g.shard; ++i) acc[i] += out[i];
  }
}

void ZeroEngine::acquire_params(int unit) {
  const int b = bucket_of(unit);
  if (!policy_.parameters || resident_[b] == unit) return;
  const PartitionLayout& lay = *layout_;
  const bool low = buf_.compute_dtype != DType::f32;
  char* dst = static_cast<char*>(gathered_[b].data());
  const size_t esz = dtype_size(buf_.compute_dtype);
  for (int gi : unit_groups_[size_t(unit)]) {
    const SubGroup& g = lay.sub_groups()[size_t(gi)];
    char* at = dst + size_t(g.flat_begin - model_->unit_begin(unit)) * esz;
    if (low) {
      auto* st = staging_.as<uint16_t>();
      gather_group(g, lay.shard_offset(gi), static_cast<const uint16_t*>(shard_compute_.data()), st);
      std::memcpy(at, st, size_t(g.count) * esz);
    } else {
      float* st = staging_.as<float>();
      gather_group(g, lay.shard_offset(gi), shard_master_.as<float>(), st);
      std::memcpy(at, st, size_t(g.count) * 4);
    }
  }
  resident_[b] = unit;
  model_->set_unit_params(unit, dst);
}

double ZeroEngine::reduce_gradients() {
  const PartitionLayout& lay = *layout_;
  if (!policy_.optimizer_states) {
    const int64_t n = lay.model_elements();
    if (distributed()) comm_->all_reduce(std::span<float>(buf_.grads, size_t(n)));
    return std::sqrt(be_.sum_squares({buf_.grads, DType::f32, {n}, Tier::device}));
  }
  if (!policy_.gradients) {  // stage 1: reduce-scatter the full gradients now
    float* padded = padded_.as<float>();
    pack(buf_.grads, padded);
    for (size_t g = 0; g < lay.sub_groups().size(); ++g) {
      const SubGroup& s = lay.sub_groups()[g];
      float* out = shard_grads_.as<float>() + lay.shard_offset(int(g));
      if (distributed())
        comm_->reduce_scatter(std::span<const float>(padded + s.storage_offset, size_t(s.padded)),
                              std::span<float>(out, size_t(s.shard)));
      else
        std::memcpy(out, padded + s.storage_offset, size_t(s.shard) * 4);
    }
  }
  double sq = be_.sum_squares({shard_grads_.data(), DType::f32, {lay.shard_elements()}, Tier::device});
  if (distributed()) comm_->all_reduce(std::span<double>(&sq, 1));
  return std::sqrt(sq);
}

bool ZeroEngine::step(float lr, float clip_scale, int64_t t) {
  if (!policy_.optimizer_states)
    return adam_->step(buf_.master, buf_.grads, buf_.compute, buf_.compute_dtype, groups_, lr, clip_scale, t);
  const bool low = buf_.compute_dtype != DType::f32;
  const bool nonfinite =
      adam_->step(shard_master_.as<float>(), shard_grads_.as<float>(), low ? shard_compute_.data() : nullptr,
                  buf_.compute_dtype, groups_, lr, clip_scale, t);
  resident_[0] = resident_[1] = -1;          // gathered parameters are stale now
  if (policy_.parameters) return nonfinite;  // stage 3: gathered again when next used
  publish_params();
  return nonfinite;
}

void ZeroEngine::publish_params() {
  // Stages 1-2: every rank's full parameters become current (bf16 copy-out, or f32).
  const bool low = buf_.compute_dtype != DType::f32;
  const PartitionLayout& lay = *layout_;
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) {
    const SubGroup& s = lay.sub_groups()[g];
    if (low)
      gather_group(s, lay.shard_offset(int(g)), static_cast<const uint16_t*>(shard_compute_.data()),
                   static_cast<uint16_t*>(padded_compute_.data()) + s.storage_offset);
    else
      gather_group(s, lay.shard_offset(int(g)), shard_master_.as<float>(), padded_.as<float>() + s.storage_offset);
  }
  if (low)
    unpack(static_cast<const uint16_t*>(padded_compute_.data()), static_cast<uint16_t*>(buf_.compute));
  else
    unpack(padded_.as<float>(), buf_.master);
}

void ZeroEngine::gather_full_params(std::span<float> out) {
  const PartitionLayout& lay = *layout_;
  STRATA_CHECK(out.size() == size_t(lay.model_elements()), "gather_full_params into " + std::to_string(out.size()),
               "the destination must hold every parameter");
  if (!policy_.optimizer_states) {
    std::memcpy(out.data(), buf_.master, out.size() * 4);
    return;
  }
  std::vector<float> padded(static_cast<size_t>(lay.padded_elements()));
  for (size_t g = 0; g < lay.sub_groups().size(); ++g)
    gather_group(lay.sub_groups()[g], lay.shard_offset(int(g)), shard_master_.as<float>(),
                 padded.data() + lay.sub_groups()[g].storage_offset);
  unpack(padded.data(), out.data());
}

size_t ZeroEngine::optimizer_state_bytes() const { return adam_->state_bytes() + shard_master_.bytes(); }

size_t ZeroEngine::comm_buffer_bytes() const {
  return padded_.bytes() + padded_compute_.bytes() + staging_.bytes() + staging_out_.bytes() + bucket_[0].bytes() +
         bucket_[1].bytes() + gathered_[0].bytes() + gathered_[1].bytes() +
         (shard_grads_.bytes() - grad_shard_bytes()) + (shard_compute_.bytes() - param_shard_bytes());
}

}  // namespace strata::zero
