// `strata bench suite [--quick]`: the ZeRO paper's GPT configurations (configs/bench) and
// their scaled-down CPU versions, trained under chosen stages, offloads and rank counts
// (real mpirun runs of `strata train --summary`), plus the scaling search: the largest model
// that trains within a fixed per-rank device budget, per stage and rank count, next to
// strata plan's prediction. Runs the planner says cannot fit are skipped with its numbers.
// Writes bench-results/<timestamp>/: results.json, results.md, suite.png, scaling.png.
#pragma once
#include <string>

namespace strata::bench {

struct SuiteOptions {
  std::string suite = "configs/bench/suite.json";
  bool quick = false;
  std::string out = "bench-results";  // results go to OUT/<UTC timestamp>/
  std::string mpirun = "mpirun";
  std::string nvme_path;        // for nvme offload runs (default: OUT/<timestamp>/nvme)
  std::string host_mem;         // per-rank host budget for the plan (default: MemAvailable / ranks)
  double peak_tflops = 0;       // device peak for MFU (0: unknown)
  double run_timeout = 900;     // seconds per run
  std::string device = "auto";  // every run's --device (cuda: one GPU per rank)
};

int run_suite(const SuiteOptions& o);

}  // namespace strata::bench
