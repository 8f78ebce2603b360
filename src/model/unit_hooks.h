// How a model lets a ZeRO engine own its parameter and gradient storage, one unit (the
// embeddings, a layer, the final norm) at a time. The model calls the hooks around each
// use; the engine points the unit at the memory it has made current.
#pragma once

namespace strata {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // The unit's parameters are about to be read (forward or backward): make them current
  // and point the model at them (GPT2::set_unit_params).
  virtual void acquire_params(int unit) = 0;
  // The unit's parameter gradients are about to be accumulated for one micro-batch: point
  // the model at zeroed storage (GPT2::set_unit_grads).
  virtual void open_grads(int unit) = 0;
  // The unit's gradients for this micro-batch are complete.
  virtual void close_grads(int unit) = 0;
};

}  // namespace strata
