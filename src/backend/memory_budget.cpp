#include "backend/memory_budget.h"

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace strata {

// STRATA_TRACE_MEMORY=1: every charge on stderr (where a budget goes, for the planner and users).
static const bool kTrace = [] {
  const char* v = std::getenv("STRATA_TRACE_MEMORY");
  return v && *v && *v != '0';
}();

MemoryBudget::MemoryBudget(std::string tier_name, size_t capacity_bytes, std::string option)
    : name_(std::move(tier_name)),
      option_(option.empty() ? "--" + name_ + "-mem" : std::move(option)),
      capacity_(capacity_bytes) {}

void MemoryBudget::charge(size_t bytes, const std::string& what) {
  std::lock_guard lock(mu_);
  if (bytes > capacity_ - std::min(used_, capacity_)) {
    throw_error(name_ + " memory budget exceeded: " + what + " requests " + format_bytes(double(bytes)) + " with " +
                    format_bytes(double(used_)) + " of " + format_bytes(double(capacity_)) + " already in use",
                "raise the " + name_ + " budget (" + option_ +
                    ") or shrink the run (--micro-batch, model size, a higher ZeRO stage or offload)");
  }
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  if (kTrace) std::fprintf(stderr, "memory %s +%zu %s (used %zu)\n", name_.c_str(), bytes, what.c_str(), used_);
  ++count_;
}

void MemoryBudget::release(size_t bytes) {
  std::lock_guard lock(mu_);
  used_ -= std::min(bytes, used_);
}

size_t MemoryBudget::used() const {
  std::lock_guard lock(mu_);
  return used_;
}
size_t MemoryBudget::high_water() const {
  std::lock_guard lock(mu_);
  return high_water_;
}
size_t MemoryBudget::allocation_count() const {
  std::lock_guard lock(mu_);
  return count_;
}

}  // namespace strata
