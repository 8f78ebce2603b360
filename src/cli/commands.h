// Sub-commands of the `strata` program. Each returns the process exit code.
#pragma once
#include <cxxopts.hpp>
#include <optional>
#include <string>

namespace strata::cli {

int train_main(int argc, char** argv);   // argv[0] is "train"
int bench_main(int argc, char** argv);   // argv[0] is "bench"
int export_main(int argc, char** argv);  // argv[0] is "export"
int plan_main(int argc, char** argv);    // argv[0] is "plan"
int plot_main(int argc, char** argv);    // argv[0] is "plot"

// Shared: prints "strata <cmd>: <message>" and returns the usage-error exit code (2).
int usage_error(const char* cmd, const std::string& message);

// Parses argv with `o` into `r`. Returns an exit code when the command is finished
// (0 after --help, 2 after an unknown option or stray argument), nullopt to go on.
std::optional<int> parse_options(cxxopts::Options& o, int argc, char** argv, const char* cmd, cxxopts::ParseResult& r);

}  // namespace strata::cli
