// `strata bench comm` (run under mpirun): bus bandwidth of each collective over message
// sizes, by nccl-tests' convention. Time per call is the slowest rank's; algbw = S/t with S
// the message size (all_reduce, broadcast: the buffer; reduce_scatter: its input;
// all_gather: its output); busbw = algbw × 2(N-1)/N (all_reduce), (N-1)/N (reduce_scatter,
// all_gather) or 1 (broadcast), comparable across rank counts and to the link speed.
#pragma once
#include <vector>

namespace strata::bench {

struct CommBenchOptions {
  long long min_bytes = 1 << 10, max_bytes = 64ll << 20;
  int iters = 10, warmup = 2;
};

int run_comm_bench(const CommBenchOptions& o);

}  // namespace strata::bench
