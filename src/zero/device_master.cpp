#include "zero/device_master.h"

#include <algorithm>

#include "core/error.h"
#include "host/convert.h"

namespace strata::zero {

DeviceMaster::DeviceMaster(Backend& backend, const StateFormat& states, float* f32, void* compute,
                           std::vector<AdamW::Group> groups)
    : be_(backend), bf16_(states.master != DType::f32), f32_(f32), compute_(compute), groups_(std::move(groups)) {
  STRATA_CHECK(!bf16_ || states.master == DType::bf16,
               "DeviceMaster: a " + std::string(dtype_name(states.master)) + " master",
               "this is a bug: masters are f32 or bf16");
}

template <typename F>
void DeviceMaster::each_f32_master(int64_t lo, int64_t hi, F&& f) const {
  for (const AdamW::Group& g : groups_) {
    const int64_t a = std::max(lo, g.offset), b = std::min(hi, g.offset + g.count);
    if (g.master_at >= 0 && b > a) f(g.master_at + (a - g.offset), a, b);
  }
}

void DeviceMaster::read(int64_t lo, int64_t hi, float* out) {
  if (hi <= lo) return;
  if (!bf16_) {
    be_.download(out, f32_ + lo, size_t(hi - lo) * 4);
    return;
  }
  half_.resize(size_t(hi - lo));
  be_.download(half_.data(), static_cast<const uint16_t*>(compute_) + lo, half_.size() * 2);
  host::convert_to_f32(out, half_.data(), DType::bf16, half_.size());
  each_f32_master(
      lo, hi, [&](int64_t at, int64_t a, int64_t b) { be_.download(out + (a - lo), f32_ + at, size_t(b - a) * 4); });
}

void DeviceMaster::write(int64_t lo, int64_t hi, const float* values) {
  if (hi <= lo) return;
  if (!bf16_) {
    be_.upload(f32_ + lo, values, size_t(hi - lo) * 4);
    return;
  }
  half_.resize(size_t(hi - lo));
  host::convert_from_f32(half_.data(), DType::bf16, values, half_.size());
  be_.upload(static_cast<uint16_t*>(compute_) + lo, half_.data(), half_.size() * 2);
  each_f32_master(
      lo, hi, [&](int64_t at, int64_t a, int64_t b) { be_.upload(f32_ + at, values + (a - lo), size_t(b - a) * 4); });
}

}  // namespace strata::zero
