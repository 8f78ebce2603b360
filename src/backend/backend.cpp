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

void Backend::matmul_gelu_forward(TensorView out, TensorView pre, TensorView inp, TensorView weight, TensorView bias) {
  matmul_forward(pre, inp, weight, bias);
  gelu_forward(out, pre);
}

}  // namespace strata
