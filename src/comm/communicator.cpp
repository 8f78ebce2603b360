#include "comm/communicator.h"

#include "core/error.h"

namespace strata {

std::string_view comm_type_name(CommType t) {
  switch (t) {
    case CommType::f32:
      return "f32";
    case CommType::f64:
      return "f64";
    case CommType::i32:
      return "i32";
    case CommType::i64:
      return "i64";
    case CommType::u8:
      return "u8";
    case CommType::u16:
      return "u16";
  }
  return "?";
}

size_t comm_type_size(CommType t) {
  switch (t) {
    case CommType::f64:
    case CommType::i64:
      return 8;
    case CommType::f32:
    case CommType::i32:
      return 4;
    case CommType::u16:
      return 2;
    case CommType::u8:
      return 1;
  }
  return 1;
}

void Communicator::set_topology(Topology t) {
  STRATA_CHECK(t.world() == size(),
               "a topology of " + std::to_string(t.world()) + " ranks for a communicator of " + std::to_string(size()),
               "this is a bug in the caller");
  topo_ = std::move(t);
  const int n = size(), l = topo_.local_size(rank());
  remote_fraction_ = n > 1 ? double(n - l) / double(n - 1) : 0.0;
}

std::unique_ptr<Communicator> Communicator::split(int) {
  throw_error("this communicator cannot be split into groups",
              "hierarchical partitioning (--hpz-partition-size) needs the MPI communicator");
}

void Communicator::check_blocks(const char* op, size_t whole, size_t block) const {
  STRATA_CHECK(whole == block * size_t(size()),
               std::string(op) + ": " + std::to_string(whole) + " elements is not " + std::to_string(size()) +
                   " ranks × " + std::to_string(block),
               "the gathered/scattered buffer must hold exactly one block per rank");
}

}  // namespace strata
