// Sub-commands of the `strata` program. Each returns the process exit code.
#pragma once
#include <string>

namespace strata::cli {

int train_main(int argc, char** argv);  // argv[0] is "train"
int bench_main(int argc, char** argv);  // argv[0] is "bench"

// Shared: prints "strata <cmd>: <message>" and returns the usage-error exit code (2).
int usage_error(const char* cmd, const std::string& message);

}  // namespace strata::cli
