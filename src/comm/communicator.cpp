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

void Communicator::check_blocks(const char* op, size_t whole, size_t block) const {
  STRATA_CHECK(whole == block * size_t(size()),
               std::string(op) + ": " + std::to_string(whole) + " elements is not " + std::to_string(size()) +
                   " ranks × " + std::to_string(block),
               "the gathered/scattered buffer must hold exactly one block per rank");
}

}  // namespace strata
