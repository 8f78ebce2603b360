#include "model/init_weights.h"

#include <algorithm>
#include <cstring>

#include "model/model_factory.h"

namespace strata {

namespace {
// The model is never run: nothing provides its parameters.
class NoHooks final : public UnitHooks {
 public:
  void begin_pass() override {}
  void acquire_params(int) override {}
  void open_grads(int) override {}
  void close_grads(int) override {}
};
}  // namespace

InitWeights::InitWeights(const ModelSpec& spec, Backend& backend, uint64_t seed)
    : seed_(seed), hooks_(std::make_unique<NoHooks>()) {
  model_ = make_model(spec, backend, 1, 1, DType::f32, ModelStorage{false, false, false, false, nullptr}, hooks_.get());
}

InitWeights::~InitWeights() = default;

void InitWeights::read(int64_t flat_begin, int64_t count, float* out) const {
  const int64_t end = flat_begin + count;
  for (int u = 0; u < model_->num_units(); ++u) {
    const int64_t a = model_->unit_begin(u), b = a + model_->unit_count(u);
    const int64_t lo = std::max(flat_begin, a), hi = std::min(end, b);
    if (lo >= hi) continue;
    if (cached_ != u) {
      unit_.assign(size_t(b - a), 0.0f);
      model_->init_unit(u, seed_, unit_.data());
      cached_ = u;
    }
    std::memcpy(out + (lo - flat_begin), unit_.data() + (lo - a), size_t(hi - lo) * 4);
  }
}

}  // namespace strata
