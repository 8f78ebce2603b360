// Lays out tensors of mixed dtypes in one buffer (a model's activation arena).
#pragma once
#include <vector>

#include "backend/buffer.h"
#include "core/tensor.h"

namespace strata {

// Views of mixed dtypes in one buffer, each 64-byte aligned.
class ArenaLayout {
 public:
  size_t add(DType t, const Shape& s) {
    size_t off = bytes_;
    bytes_ += (size_t(s.numel()) * dtype_size(t) + 63) / 64 * 64;
    items_.push_back({off, t, s});
    return items_.size() - 1;
  }
  size_t bytes() const { return bytes_; }
  TensorView view(const Buffer& b, size_t idx) const {
    const auto& it = items_[idx];
    return b.view(it.dtype, it.shape, it.offset);
  }

 private:
  struct Item {
    size_t offset;
    DType dtype;
    Shape shape;
  };
  size_t bytes_ = 0;
  std::vector<Item> items_;
};

}  // namespace strata
