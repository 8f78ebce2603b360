#include "zero/state_store.h"

#include <cstring>

#include "host/convert.h"

namespace strata::zero {

void StoreShape::master_to_compute(void* dst, const void* master, int64_t n) const {
  if (format.master == compute)
    std::memcpy(dst, master, size_t(n) * dtype_size(compute));
  else  // an f32 master (a bf16 one comes only with bf16 compute)
    host::convert_from_f32(dst, compute, static_cast<const float*>(master), size_t(n));
}

}  // namespace strata::zero
