// Tensor views: a pointer plus dtype, shape and the memory tier it lives in.
// Views never own memory; buffers (src/backend/buffer.h) do.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace strata {

// Where bytes live. The tier manager and the offload engine move partitions between them.
enum class Tier : uint8_t { device, host, nvme };
std::string_view tier_name(Tier t);

struct Shape {
  static constexpr int kMaxRank = 4;
  std::array<int64_t, kMaxRank> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[size_t(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& o) const;
  std::string str() const;  // "[4, 256, 768]"
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Tier tier = Tier::device;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }

  // Typed access; throws if the dtype does not match (a misread buffer is a bug).
  template <typename T>
  T* as() const {
    STRATA_CHECK(
        dtype == dtype_of<T>(),
        "tensor of dtype " + std::string(dtype_name(dtype)) + " read as " + std::string(dtype_name(dtype_of<T>())),
        "this is a bug in the caller: pass a view of the matching dtype");
    return static_cast<T*>(data);
  }
  // The sub-view of the i-th slice along the first dimension.
  TensorView slice0(int64_t i) const;
};

}  // namespace strata
