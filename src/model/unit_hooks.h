// How a model lets a ZeRO engine own its parameter and gradient storage, one unit (the
// embeddings, a layer, the final norm) at a time. The model calls the hooks around each
// use; the engine points the unit at the memory it has made current.
#pragma once
#include <cstdint>

namespace strata {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // A forward or backward pass starts: parameters gathered in an earlier pass must be
  // gathered again (each pass reads every unit once, as the ZeRO paper counts it).
  virtual void begin_pass() = 0;
  // The unit's parameters are about to be read (forward or backward): make them current
  // and point the model at them (GPT2::set_unit_params).
  virtual void acquire_params(int unit) = 0;
  // The unit's parameter gradients are about to be accumulated for one micro-batch: point
  // the model at zeroed storage (GPT2::set_unit_grads).
  virtual void open_grads(int unit) = 0;
  // The unit's gradients for this micro-batch are complete.
  virtual void close_grads(int unit) = 0;
};

// What an engine needs from a model whose storage it owns (GPT2 implements it).
class UnitModel {
 public:
  virtual ~UnitModel() = default;
  virtual int num_units() const = 0;
  virtual int64_t unit_begin(int u) const = 0;
  virtual int64_t unit_count(int u) const = 0;
  virtual void set_unit_params(int u, void* base) = 0;
  virtual void set_unit_grads(int u, float* base) = 0;
  // Unit u's initial f32 parameters into dst[unit_count(u)].
  virtual void init_unit(int u, uint64_t seed, float* dst) const = 0;
};

}  // namespace strata
