#include "backend/backend.h"

namespace strata {

void Backend::upload(void* device_dst, const void* host_src, size_t bytes) {
  Stream& s = compute_stream();
  copy_async(device_dst, host_src, bytes, s);
  s.synchronize();
}

void Backend::download(void* host_dst, const void* device_src, size_t bytes) {
  Stream& s = compute_stream();
  copy_async(host_dst, device_src, bytes, s);
  s.synchronize();
}

}  // namespace strata
