// An owning, move-only block of memory in one tier, returned to its allocator on destruction.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "core/tensor.h"

namespace strata {

class Buffer {
 public:
  using Deleter = std::function<void(void*, size_t)>;
  Buffer() = default;
  Buffer(void* ptr, size_t bytes, Tier tier, std::string tag, Deleter deleter);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Tier tier() const { return tier_; }
  const std::string& tag() const { return tag_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void zero() const;  // host or NVMe-staging memory only: fills with zero bytes (device: Backend::fill_zero)
  // A view of `shape` elements of `dtype` starting `offset_bytes` in; bounds-checked.
  TensorView view(DType dtype, Shape shape, size_t offset_bytes = 0) const;

 private:
  void reset();
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  Tier tier_ = Tier::device;
  std::string tag_;
  Deleter deleter_;
};

}  // namespace strata
