// Grow-only scratch memory charged to the backend's budget. Ops ask for what they need;
// after the first step every request is already satisfied, so the steady state allocates
// nothing (MemoryBudget::allocation_count() proves it in tests).
#pragma once
#include <array>
#include <cstddef>
#include <functional>

#include "backend/buffer.h"

namespace strata::cpu {

// gemm_a/b: the f32 panels (or the bf16 kernel's packs); gemm_c: an f32 accumulator; dout16:
// an f32 gradient's column block split into two bf16 terms (matmul_backward).
enum class Scratch : int { gemm_a, gemm_b, gemm_c, attention, layernorm, dout16, count };

class Workspace {
 public:
  using Allocator = std::function<Buffer(size_t bytes, const std::string& tag)>;
  explicit Workspace(Allocator alloc) : alloc_(std::move(alloc)) {}
  // At least `bytes` of 64-byte-aligned scratch for `slot`; contents are not preserved on growth.
  void* get(Scratch slot, size_t bytes);
  template <typename T>
  T* get(Scratch slot, size_t count) {
    return static_cast<T*>(get(slot, count * sizeof(T)));
  }

 private:
  Allocator alloc_;
  std::array<Buffer, size_t(Scratch::count)> slots_;
};

}  // namespace strata::cpu
