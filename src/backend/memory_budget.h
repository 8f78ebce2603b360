// A capacity budget for one memory tier: every allocation is charged here first, and a
// request that would exceed it is an error naming the tier, the budget and the request.
#pragma once
#include <atomic>
#include <cstddef>
#include <mutex>
#include <string>

namespace strata {

class MemoryBudget {
 public:
  // `option` names the setting that raises the budget, for the error message.
  MemoryBudget(std::string tier_name, size_t capacity_bytes, std::string option = "");

  // Charges `bytes` for `what`; throws strata::Error if the budget would be exceeded.
  void charge(size_t bytes, const std::string& what);
  void release(size_t bytes);

  const std::string& tier_name() const { return name_; }
  size_t capacity() const { return capacity_; }
  size_t used() const;
  size_t high_water() const;
  // Number of successful charges so far: lets tests prove the steady state allocates nothing.
  size_t allocation_count() const;

 private:
  std::string name_, option_;
  size_t capacity_;
  mutable std::mutex mu_;
  size_t used_ = 0, high_water_ = 0, count_ = 0;
};

}  // namespace strata
