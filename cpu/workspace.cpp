#include "cpu/workspace.h"

namespace strata::cpu {

static const char* slot_name(Scratch s) {
  switch (s) {
    case Scratch::gemm_a:
      return "scratch:gemm_a";
    case Scratch::gemm_b:
      return "scratch:gemm_b";
    case Scratch::gemm_c:
      return "scratch:gemm_c";
    case Scratch::attention:
      return "scratch:attention";
    case Scratch::layernorm:
      return "scratch:layernorm";
    case Scratch::dout16:
      return "scratch:dout16";
    case Scratch::count:
      break;
  }
  return "scratch";
}

void* Workspace::get(Scratch slot, size_t bytes) {
  Buffer& b = slots_[size_t(slot)];
  if (b.bytes() < bytes) {
    b = Buffer();  // release first so the budget sees the replacement, not both
    b = alloc_(bytes, slot_name(slot));
  }
  return b.data();
}

}  // namespace strata::cpu
