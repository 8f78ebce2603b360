#include "core/tensor.h"

namespace strata {

std::string_view tier_name(Tier t) {
  switch (t) {
    case Tier::device:
      return "device";
    case Tier::host:
      return "host";
    case Tier::nvme:
      return "nvme";
  }
  return "?";
}

Shape::Shape(std::initializer_list<int64_t> d) {
  STRATA_CHECK(d.size() <= size_t(kMaxRank), "shape of rank " + std::to_string(d.size()),
               "tensors have at most 4 dimensions");
  for (int64_t v : d) {
    STRATA_CHECK(v >= 0, "negative dimension " + std::to_string(v), "dimensions are counts");
    dims[size_t(rank++)] = v;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[size_t(i)];
  return rank == 0 ? 0 : n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[size_t(i)] != o.dims[size_t(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[size_t(i)]);
  return s + "]";
}

TensorView TensorView::slice0(int64_t i) const {
  STRATA_CHECK(shape.rank >= 1 && i >= 0 && i < shape[0], "slice " + std::to_string(i) + " of tensor " + shape.str(),
               "index is out of range");
  TensorView v = *this;
  v.shape.rank = shape.rank - 1;
  for (int d = 1; d < shape.rank; ++d) v.shape.dims[size_t(d - 1)] = shape.dims[size_t(d)];
  if (v.shape.rank == 0) v.shape = Shape{1};
  v.data = static_cast<char*>(data) + size_t(i) * v.bytes();
  return v;
}

}  // namespace strata
