#include "backend/buffer.h"

#include <cstring>

namespace strata {

void Buffer::zero() const {
  STRATA_CHECK(tier_ != Tier::device, "Buffer::zero on device buffer '" + tag_ + "'",
               "this is a bug: device memory belongs to the backend; use Backend::fill_zero on a stream");
  if (ptr_ && bytes_) std::memset(ptr_, 0, bytes_);
}

Buffer::Buffer(void* ptr, size_t bytes, Tier tier, std::string tag, Deleter deleter)
    : ptr_(ptr), bytes_(bytes), tier_(tier), tag_(std::move(tag)), deleter_(std::move(deleter)) {}

Buffer::~Buffer() { reset(); }

Buffer::Buffer(Buffer&& o) noexcept { *this = std::move(o); }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    tier_ = o.tier_;
    tag_ = std::move(o.tag_);
    deleter_ = std::move(o.deleter_);
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (ptr_ && deleter_) deleter_(ptr_, bytes_);
  ptr_ = nullptr;
  bytes_ = 0;
}

TensorView Buffer::view(DType dtype, Shape shape, size_t offset_bytes) const {
  TensorView v{static_cast<char*>(ptr_) + offset_bytes, dtype, shape, tier_};
  STRATA_CHECK(offset_bytes + v.bytes() <= bytes_,
               "view " + shape.str() + " at byte " + std::to_string(offset_bytes) + " of buffer '" + tag_ + "' (" +
                   std::to_string(bytes_) + " bytes)",
               "this is a bug: the view runs past the end of its buffer");
  return v;
}

}  // namespace strata
