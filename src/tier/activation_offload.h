// Activation checkpoints in host RAM (--offload-activations cpu): a ring of three device
// buffers; each layer's output is copied device→host as soon as forward writes it, and
// fetched host→device one layer ahead of backward. Three slots suffice: backward descends,
// so the slot a fetch overwrites always holds a checkpoint backward has finished with.
#pragma once
#include <memory>
#include <vector>

#include "model/activation_store.h"
#include "tier/tier_manager.h"

namespace strata::tier {

class HostActivationStore final : public ActivationStore {
 public:
  HostActivationStore(TierManager& tm, int layers, size_t bytes_per_checkpoint);
  ~HostActivationStore() override;
  void* forward_slot(int layer) override;
  void forward_done(int layer) override;
  const void* backward_slot(int layer) override;
  size_t device_bytes() const { return ring_.bytes(); }
  size_t host_bytes() const { return host_.bytes(); }
  double blocked_seconds() const { return blocked_s_; }

 private:
  static constexpr int kSlots = 3;
  char* slot(int s) const { return static_cast<char*>(ring_.data()) + size_t(s) * bytes_; }
  void fetch(int layer);
  void wait(Event& e);
  TierManager& tm_;
  int layers_;
  size_t bytes_;
  Buffer ring_, host_;
  int resident_[kSlots] = {-1, -1, -1};              // which layer's output each slot holds
  std::unique_ptr<Event> out_[kSlots], in_[kSlots];  // per slot: its copy out / in is done
  std::unique_ptr<Event> ready_;                     // compute → d2h: a checkpoint is written
  double blocked_s_ = 0;
};

}  // namespace strata::tier
