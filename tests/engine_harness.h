// Drives the ZeRO engine with a small fake model: no transformer, no data, no trainer. A
// unit's "backward" reads its current parameters through the backend and uploads a
// gradient that depends on them, on the rank and on the step, so the updates move and
// every stage, tier and rank count is exercised through the engine's own interface
// (UnitHooks, reduce_gradients, step). Device memory is touched by backend copies only, so
// the harness runs in opaque mode too.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "zero/zero_engine.h"

namespace strata::test {

class FakeModel final : public UnitModel {
 public:
  explicit FakeModel(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {
    begin_.push_back(0);
    for (int64_t s : sizes_) begin_.push_back(begin_.back() + s);
    grads_.assign(sizes_.size(), nullptr);
    params_.assign(sizes_.size(), nullptr);
  }
  int num_units() const override { return int(sizes_.size()); }
  int64_t unit_begin(int u) const override { return begin_[size_t(u)]; }
  int64_t unit_count(int u) const override { return sizes_[size_t(u)]; }
  int64_t elements() const { return begin_.back(); }
  void set_unit_params(int u, void* base) override { params_[size_t(u)] = base; }
  void set_unit_grads(int u, float* base) override { grads_[size_t(u)] = base; }
  void init_unit(int u, uint64_t seed, float* dst) const override {
    for (int64_t i = 0; i < sizes_[size_t(u)]; ++i)
      dst[i] = 0.01f * float((begin_[size_t(u)] + i + int64_t(seed)) % 7) - 0.03f;
  }
  float* grads(int u) const { return grads_[size_t(u)]; }
  void* params(int u) const { return params_[size_t(u)]; }
  // Integer-valued gradients (sums are exact in any order), one per rank and element.
  static float grad_value(int rank, int64_t i) { return float(int64_t((i * 5 + rank * 3) % 9) - 4); }

 private:
  std::vector<int64_t> sizes_, begin_;
  std::vector<float*> grads_;
  std::vector<void*> params_;
};

// "u<N>", a fake unit's parameter name (snprintf, not "u" + std::to_string(u): GCC 12 warns
// -Wrestrict on that, a false positive).
inline std::string unit_name(size_t u) {
  char name[24];
  std::snprintf(name, sizeof name, "u%zu", u);
  return name;
}

// One engine over a FakeModel, owning the model's parameter buffers where the stage says
// the model keeps them. f32 only: the compute copy is the master.
class EngineHarness {
 public:
  EngineHarness(Backend& be, Communicator* comm, zero::ZeroOptions options, std::vector<int64_t> unit_sizes,
                tier::TierManager* tiers = nullptr, AdamWConfig adam = {})
      : be_(be), comm_(comm), model_(std::move(unit_sizes)), engine_(be, comm, options, adam, tiers) {
    zero::ModelBuffers mb;
    if (engine_.model_owns_params()) {
      master_ = be.allocate(size_t(model_.elements()) * 4, "fake:master");
      std::vector<float> init(size_t(model_.elements()));
      for (int u = 0; u < model_.num_units(); ++u) model_.init_unit(u, 1, init.data() + model_.unit_begin(u));
      be.upload(master_.data(), init.data(), init.size() * 4);
      mb.master = master_.as<float>();
      for (int u = 0; u < model_.num_units(); ++u)
        model_.set_unit_params(u, master_.as<float>() + model_.unit_begin(u));
    }
    for (int u = 0; u < model_.num_units(); ++u) {
      mb.params.push_back({unit_name(u), u, model_.unit_begin(u), model_.unit_count(u), false, u % 2 == 0});
    }
    engine_.attach(model_, std::move(mb), 1);
  }

  zero::ZeroEngine& engine() { return engine_; }
  FakeModel& model() { return model_; }

  // One step of `micro` micro-batches: a forward pass acquiring every unit in order, then a
  // backward closing them in reverse, each adding grad_value(rank + micro, i) + 0.5·param to
  // its gradients. Returns what
  // reduce_gradients agreed.
  zero::ReducedStep step(int64_t t, int micro = 1, float lr = 1e-2f) {
    const int rank = comm_ ? comm_->rank() : 0;
    engine_.begin_step({lr, 1.0f, t});
    for (int m = 0; m < micro; ++m) {
      engine_.begin_micro(m, micro);
      engine_.begin_pass();
      for (int u = 0; u < model_.num_units(); ++u) engine_.acquire_params(u);
      engine_.begin_pass();
      for (int u = model_.num_units() - 1; u >= 0; --u) {
        engine_.acquire_params(u);
        engine_.open_grads(u);
        const size_t n = size_t(model_.unit_count(u));
        std::vector<float> p(n), g(n);
        be_.download(p.data(), model_.params(u), n * 4);
        be_.download(g.data(), model_.grads(u), n * 4);  // a model adds to its gradients
        for (size_t i = 0; i < n; ++i)
          g[i] += FakeModel::grad_value(rank + m, model_.unit_begin(u) + int64_t(i)) + 0.5f * p[i];
        be_.upload(model_.grads(u), g.data(), n * 4);
        engine_.close_grads(u);
      }
    }
    const zero::ReducedStep red = engine_.reduce_gradients(0);
    engine_.step(lr, 1.0f, t);
    return red;
  }

  std::vector<float> params() {
    std::vector<float> out(size_t(model_.elements()));
    engine_.gather_full_params(out);
    return out;
  }

 private:
  Backend& be_;
  Communicator* comm_;
  FakeModel model_;
  zero::ZeroEngine engine_;
  Buffer master_;
};

}  // namespace strata::test
