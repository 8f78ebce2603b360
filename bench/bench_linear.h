// `strata bench linear`: the step's linear-layer GEMMs in bf16 on every path this CPU has —
// the f32 panels, Strata's AVX512-BF16 kernel, oneDNN's native matmul — each against the path
// cpu/gemm_path.h's rule takes here, measured in the same run, with the largest difference
// of each path's results from the panels'. The figures behind that rule.
#pragma once
#include <string>

namespace strata::bench {

struct LinearBenchOptions {
  std::string model = "configs/gpt2-small.json";
  int micro_batch = 4, seq_len = 256;
  int reps = 3;  // timed calls per shape and path (the best is kept), after one untimed
};

// Prints a table and ends with one JSON line on stdout. Returns the exit code.
int run_linear_bench(const LinearBenchOptions& o);

}  // namespace strata::bench
