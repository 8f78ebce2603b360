// One error type for the whole engine: what failed, where, and what to do.
#pragma once
#include <source_location>
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string hint = {}, std::source_location where = std::source_location::current());
  const std::string& what_failed() const { return what_; }
  const std::string& hint() const { return hint_; }
  const std::string& where() const { return where_; }

 private:
  std::string what_, hint_, where_;
};

// Cold, out-of-line throw so the checks cost one predictable branch on the hot path.
[[noreturn]] void throw_error(std::string what, std::string hint,
                              std::source_location where = std::source_location::current());

// Formats a byte count as "1.50 GiB" for messages.
std::string format_bytes(double bytes);

}  // namespace strata

// STRATA_CHECK(cond, what, hint): throws strata::Error naming the failed condition's meaning.
#define STRATA_CHECK(cond, what, hint)       \
  do {                                       \
    if (!(cond)) [[unlikely]]                \
      ::strata::throw_error((what), (hint)); \
  } while (0)
