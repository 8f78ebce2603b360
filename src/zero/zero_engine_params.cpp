// ZeroEngine, part 3 of 4: the optimizer step and parameters — publishing (stages 1-2; stage
// 3's gathers are the ParamCoordinator's), and the full gather for tests and export.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "host/convert.h"
#include "zero/zero_engine.h"

namespace strata::zero {

// ---------------------------------------------------------------- optimizer and parameters

void ZeroEngine::step(float lr, float grad_scale, int64_t t) {
  if (offload_) offload_->step(lr, grad_scale, t);  // the host's part, concurrently with the device's
  if (!policy_.optimizer_states) {
    adam_->step(buf_.master, reducer_->full(), grad_dtype_, low_precision() ? buf_.compute : nullptr,
                buf_.compute_dtype, groups_, lr, grad_scale, t);
  } else {
    adam_->step(shard_master_.as<float>(), reducer_->shard(), grad_dtype_,
                low_precision() ? shard_compute_.data() : nullptr, buf_.compute_dtype, groups_, lr, grad_scale, t);
  }
  after_compute();  // publishing reads what the update wrote
  if (offload_) offload_->commit();
  finish_step();
  if (policy_.optimizer_states && !policy_.parameters) publish_params();
  if (params_) params_->publish_persistent();
  // The next forward reads what was published: the compute stream waits for it (CPU: the
  // host does), not the host for the collectives.
  cs().record(*published_);
  be_.compute_stream().wait(*published_);
}

void ZeroEngine::skip_step() {
  if (offload_) offload_->skip();  // undo the speculative copy-out: the committed state stands
  finish_step();
}

void ZeroEngine::finish_step() {
  // Gathered parameters are stale after the update (and unneeded after a skipped one).
  if (params_ || frozen_) drain();
  if (params_) params_->end_step();
  if (frozen_) frozen_->end_step();
}

void ZeroEngine::publish_params() {
  // Stages 1-2: every rank's full parameters become current, one all-gather bucket at a time.
  const PartitionLayout& lay = plan_.layout;
  const bool low = low_precision();
  const size_t esz = low ? dtype_size(buf_.compute_dtype) : 4;
  const char* shard = static_cast<const char*>(low ? shard_compute_.data() : shard_master_.data());
  char* full = static_cast<char*>(low ? buf_.compute : static_cast<void*>(buf_.master));
  char* slot = reinterpret_cast<char*>(reducer_->bucket_memory());
  for (const Bucket& b : plan_.gather.buckets()) {
    const size_t w = size_t(b.width());
    if (distributed()) {
      if (low)
        comm_->all_gather(std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(shard) + b.lo, w),
                          std::span<uint16_t>(reinterpret_cast<uint16_t*>(slot), w * size_t(world_)), cs());
      else
        comm_->all_gather(std::span<const float>(reinterpret_cast<const float*>(shard) + b.lo, w),
                          std::span<float>(reinterpret_cast<float*>(slot), w * size_t(world_)), cs());
    } else {
      be_.copy_async(slot, shard + size_t(b.lo) * esz, w * esz, cs());
    }
    for (const BucketPiece& piece : b.pieces)
      unpack_piece(be_, cs(), lay, b, piece, slot, esz,
                   full + size_t(lay.sub_groups()[size_t(piece.group)].flat_begin) * esz);
  }
}

void ZeroEngine::begin_eval() {
  if (params_) params_->begin_eval();
  if (frozen_) frozen_->begin_eval();
}

void ZeroEngine::end_eval() {
  if (!params_ && !frozen_) return;
  drain();
  if (params_) params_->end_eval();
  if (frozen_) frozen_->end_eval();
}

void ZeroEngine::begin_pass() {
  if (params_) params_->begin_pass();
  if (frozen_) frozen_->begin_pass();
}

void ZeroEngine::acquire_params(int unit) {
  if (frozen_) frozen_->acquire(unit);
  if (params_) params_->acquire(unit);
}

void ZeroEngine::attach_frozen(UnitModel& model, std::vector<ParamSpan> params, FrozenPlacement where,
                               const std::function<void(int unit, float* dst)>& fill) {
  STRATA_CHECK(policy_.parameters && model_, "ZeroEngine::attach_frozen at stage " + std::to_string(opts_.stage),
               "this is a bug in the caller: frozen weights are partitioned at stage 3, after attach");
  ZeroOptions o = opts_;
  o.offload_optimizer = false, o.offload_param = where.offload, o.nvme = where.offload && where.nvme;
  o.hpz_partition_size = 1;
  frozen_ =
      std::make_unique<FrozenParams>(be_, distributed() ? comm_ : nullptr, o, tiers_, cs(), stream_ != nullptr, stats_);
  frozen_->attach(model, std::move(params), buf_.compute_dtype, where.embedding_in_backward, fill);
}

// ---------------------------------------------------------------- tests, export, accounting

void ZeroEngine::quiesce() {
  if (stream_) try {
      stream_->synchronize();
    } catch (const Error&) {
    }
  if (offload_) {
    offload_->quiesce();
  } else if (tiers_) {  // the tiers' streams carry the activation offload's copies too
    for (Stream* s : tiers_->streams()) try {
        s->synchronize();
      } catch (const Error&) {
      }
  }
}

void ZeroEngine::gather_full_params(std::span<float> out) {
  const PartitionLayout& lay = plan_.layout;
  STRATA_CHECK(out.size() == size_t(lay.model_elements()), "gather_full_params into " + std::to_string(out.size()),
               "the destination must hold every parameter");
  drain();
  if (!policy_.optimizer_states) {
    be_.download(out.data(), buf_.master, out.size() * 4);
    return;
  }
  wait_host();
  // This rank's master shard, from the device and (offloaded part) the host.
  std::vector<float> mine(static_cast<size_t>(lay.shard_elements()));
  master_->read(0, plan_.host_begin, mine.data());
  if (host_ && mine.size() > size_t(plan_.host_begin))
    host_->read_master(plan_.host_begin, int64_t(mine.size()), mine.data() + plan_.host_begin);
  std::vector<float> padded(static_cast<size_t>(lay.padded_elements()));
  for (size_t g = 0; g < lay.sub_groups().size(); ++g) {  // host memory: the blocking collective
    const SubGroup& s = lay.sub_groups()[g];
    const float* from = mine.data() + lay.shard_offset(int(g));
    float* to = padded.data() + s.storage_offset;
    if (distributed())
      comm_->all_gather(std::span<const float>(from, size_t(s.shard)), std::span<float>(to, size_t(s.padded)));
    else
      std::memcpy(to, from, size_t(s.shard) * 4);
  }
  for (const SubGroup& g : lay.sub_groups())
    std::memcpy(out.data() + g.flat_begin, padded.data() + g.storage_offset, size_t(g.count) * 4);
}

}  // namespace strata::zero
