// Device addresses of the CPU backend. Normally a device buffer is plain host memory. In
// opaque mode (STRATA_OPAQUE_DEVICE=1) allocate() hands out the address with bit 62 set:
// non-canonical on x86-64, so any load or store through it faults at once, as a GPU
// address dereferenced on the host would. Only the backend's own ops, copies and
// transport_address() translate it back. Offsets added to a tagged address keep the tag.
#pragma once
#include <cstdint>

namespace strata::cpu {

inline constexpr uintptr_t kDeviceTag = uintptr_t(1) << 62;

// Whether STRATA_OPAQUE_DEVICE=1 is set (read per call: backends read it when built).
bool opaque_device_requested();

inline void* tag_device(void* p) { return p ? reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kDeviceTag) : p; }
// Host addresses never have bit 62 set (47-bit user space), so untagging one is a no-op.
template <typename T>
inline T* host_address(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) & ~kDeviceTag);
}

}  // namespace strata::cpu
