#include "tier/activation_offload.h"

#include <chrono>
#include <cstring>

namespace strata::tier {

HostActivationStore::HostActivationStore(TierManager& tm, int layers, size_t bytes_per_checkpoint)
    : tm_(tm),
      layers_(layers),
      bytes_((bytes_per_checkpoint + 63) / 64 * 64),
      ring_(tm.allocate(Tier::device, bytes_ * kSlots, "activations:checkpoint_ring")),
      host_(tm.allocate(Tier::host, bytes_ * size_t(std::max(layers, 1)), "host:activation_checkpoints")) {
  for (int s = 0; s < kSlots; ++s) out_[s] = tm.device().make_event(), in_[s] = tm.device().make_event();
  ready_ = tm.device().make_event();
}

HostActivationStore::~HostActivationStore() {
  try {
    tm_.d2h().synchronize();
    tm_.h2d().synchronize();
  } catch (...) {
  }
}

void HostActivationStore::wait(Event& e) {
  // Compute waits (CPU: the caller blocks) before it writes or reads the slot.
  const auto t0 = std::chrono::steady_clock::now();
  tm_.device().compute_stream().wait(e);
  blocked_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void* HostActivationStore::forward_slot(int layer) {
  const int s = layer % kSlots;
  wait(*out_[s]);  // the checkpoint it held has reached the host
  wait(*in_[s]);
  resident_[s] = layer;
  return slot(s);
}

void HostActivationStore::forward_done(int layer) {
  const int s = layer % kSlots;
  // The layer's output was written by the compute enqueued so far (CPU: already done).
  tm_.device().compute_stream().record(*ready_);
  tm_.d2h().wait(*ready_);
  tm_.device().copy_async(static_cast<char*>(host_.data()) + size_t(layer) * bytes_, slot(s), bytes_, tm_.d2h());
  tm_.count(Edge::d2h, bytes_);
  tm_.d2h().record(*out_[s]);
}

void HostActivationStore::fetch(int layer) {
  const int s = layer % kSlots;
  if (resident_[s] == layer) return;
  wait(*out_[s]);  // never overwrite a slot whose copy out is still running
  resident_[s] = layer;
  tm_.device().copy_async(slot(s), static_cast<const char*>(host_.data()) + size_t(layer) * bytes_, bytes_, tm_.h2d());
  tm_.count(Edge::h2d, bytes_);
  tm_.h2d().record(*in_[s]);
}

const void* HostActivationStore::backward_slot(int layer) {
  fetch(layer);
  if (layer > 0) fetch(layer - 1);  // one ahead
  wait(*in_[layer % kSlots]);
  return slot(layer % kSlots);
}

}  // namespace strata::tier
