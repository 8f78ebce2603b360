// `strata bench adam`: the fused CPU Adam against the machine's bound for its access
// pattern (read 4 f32 arrays, write 3 back in place) measured in the same run, on the same
// threads and tiles, and against DeepSpeed's CPU Adam when its harness is given.
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
};

int run_adam_bench(const AdamBenchOptions& o);

}  // namespace strata::bench
