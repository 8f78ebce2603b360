// What the rest of the program asks of CUDA without including its headers.
#pragma once
#include <string>

namespace strata::cuda {

// Number of usable CUDA devices; 0 with `why` set when there are none (no driver, no GPU).
int device_count(std::string* why = nullptr);

}  // namespace strata::cuda
