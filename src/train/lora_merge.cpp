#include "train/lora_merge.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"
#include "model/model_family.h"
#include "train/train_options.h"
#include "train/weights_checksum.h"

namespace strata {

LoraConfig lora_config_of(const CheckpointManifest& m) {
  const nlohmann::json& l = m.run["lora"];
  LoraOptions o;
  o.lora_rank = l.value("rank", 0), o.lora_alpha = l.value("alpha", 8.0), o.lora_dropout = l.value("dropout", 0.0);
  o.lora_targets = l.value("targets", std::string());
  return o.lora_config();
}

LoraMerged::LoraMerged(const CheckpointManifest& m, const ModelSpec& spec, const FlatSource& base,
                       const FlatSource& adapters)
    : base_(base) {
  const LoraConfig cfg = lora_config_of(m);
  targets_ = lora_targets(spec, cfg);
  rank_ = cfg.rank, scale_ = float(cfg.scaling());
  const std::vector<ParamSpec> layout = spec.family->unit_layout(spec);
  std::vector<int64_t> flat(layout.size() + 1, 0);
  for (size_t i = 0; i < layout.size(); ++i) flat[i + 1] = flat[i] + layout[i].shape.numel();
  int64_t at = 0;
  for (const LoraTarget& t : targets_) {
    offsets_.push_back(flat[size_t(t.first_spec)]);
    a_.emplace_back(size_t(rank_ * t.in));
    adapters.read(at, int64_t(a_.back().size()), a_.back().data());
    at += int64_t(a_.back().size());
    b_.emplace_back(size_t(t.out * rank_));
    adapters.read(at, int64_t(b_.back().size()), b_.back().data());
    at += int64_t(b_.back().size());
  }
  STRATA_CHECK(
      at == m.num_params,
      "the checkpoint holds " + std::to_string(m.num_params) + " adapter values, its adapters " + std::to_string(at),
      "merge a checkpoint this version of strata wrote");
  const nlohmann::json& l = m.run["lora"];
  if (!l.contains("base_checksum")) return;
  // The base, unit by unit as the run read it, against the checksum the checkpoint recorded.
  std::vector<int64_t> unit_size(size_t(spec.n_layer()) + 2, 0);
  for (const ParamSpec& p : layout) unit_size[size_t(p.unit)] += p.shape.numel();
  const std::string hex = weights_checksum(base, unit_size);
  STRATA_CHECK(l["base_checksum"] == hex,
               "the base's weights (checksum " + hex + ") are not those the adapters were trained on (" +
                   l.value("base", std::string("?")) + ", checksum " + l["base_checksum"].get<std::string>() + ")",
               "give --source the model directory the run started from");
}

void LoraMerged::read(int64_t flat_begin, int64_t count, float* out) const {
  base_.read(flat_begin, count, out);
  const int64_t end = flat_begin + count;
  for (size_t k = 0; k < targets_.size(); ++k) {
    const LoraTarget& t = targets_[k];
    const int64_t lo = std::max(flat_begin, offsets_[k]), hi = std::min(end, offsets_[k] + t.out * t.in);
    const float* A = a_[k].data();
    const float* B = b_[k].data();
    for (int64_t f = lo; f < hi; ++f) {  // element (row, col) of W [out, in] gains s·Σ_j B[row, j]·A[j, col]
      const int64_t row = (f - offsets_[k]) / t.in, col = (f - offsets_[k]) % t.in;
      double d = 0;
      for (int j = 0; j < rank_; ++j) d += double(B[row * rank_ + j]) * double(A[j * t.in + col]);
      out[f - flat_begin] += float(double(scale_) * d);
    }
  }
}

}  // namespace strata
