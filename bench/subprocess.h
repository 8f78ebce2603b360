// Runs a command with its output appended to a log file, in its own process group so a
// timeout ends mpirun and every rank it started.
#pragma once
#include <string>
#include <vector>

namespace strata::bench {

struct ProcessResult {
  int exit_code = -1;  // the command's status; 128+N when killed by signal N
  bool timed_out = false;
  double seconds = 0;
};

// timeout_s <= 0: no limit.
ProcessResult run_logged(const std::vector<std::string>& argv, const std::string& log_path, double timeout_s);

// Runs a shell command line and returns what it wrote to stdout (add 2>&1 for stderr too);
// empty when it could not be started.
std::string run_captured(const std::string& shell_cmd);

// The command as a shell line (for logs and reports).
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace strata::bench
