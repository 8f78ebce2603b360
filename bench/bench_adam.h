// `strata bench adam`: the fused CPU Adam against the machine's bound for its access
// pattern (read 4 f32 arrays, write 3 back in place; with --state-dtype/--master-dtype/
// --grad-dtype bf16 those arrays in bf16) measured in the same run, on the same threads and
// tiles, and against DeepSpeed's CPU Adam when its harness is there (bench/peers/): its f32
// Step_8, and with --state-dtype bf16 its 16-bit-state step (bf16 parameters, gradients, m, v).
#pragma once
#include <string>
#include <vector>

namespace strata::bench {

struct AdamBenchOptions {
  std::vector<long long> sizes = {64ll << 20, 256ll << 20};  // parameters
  int threads = 0;
  int repeats = 5;
  std::string isa = "auto";
  bool pin = false;
  std::string peer = "auto";  // auto | none | path to the DeepSpeed harness (bench/peers/)
  // The states', the master's and the gradients' dtypes (f32 | bf16) and the 16-bit states' rounding.
  std::string state_dtype = "f32", master_dtype = "f32", grad_dtype = "f32";
  bool stochastic = true;
};

int run_adam_bench(const AdamBenchOptions& o);

}  // namespace strata::bench
