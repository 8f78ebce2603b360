// What `strata bench suite` runs, read from a JSON file (configs/bench/suite.json): for each
// mode ("quick", "full") a list of sweeps — models × stages × offloads × checkpointing ×
// rank counts, each combination one training run — and the scaling search (the largest
// model that trains within a fixed per-rank device budget, per stage and rank count).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::bench {

// What a run trains with besides the model, stage, offload and ranks (sweeps and the
// scaling search share it; their defaults differ).
struct RunSettings {
  std::string precision = "bf16";
  int micro_batch = 2, seq_len = 64, steps = 3;
  std::string device_mem = "8GiB";                                            // per rank
  int64_t reduce_bucket_size = 500000000, allgather_bucket_size = 500000000;  // train's defaults
  int64_t param_persistence_threshold = 100000;                               // stage 3: smaller stay whole
};

struct SuiteRun : RunSettings {
  std::string sweep, model;  // model: a path or a named size (configs/bench)
  int stage = 0, ranks = 1;
  std::string offload = "none";  // none | cpu | nvme | cpu+param | nvme+param (as strata plan)
  bool checkpointing = false;
};

struct ScalingSpec : RunSettings {
  ScalingSpec() { micro_batch = 1, seq_len = 32, steps = 2, device_mem = "32MiB"; }
  bool enabled = false;
  int n_embd = 128, n_head = 4, vocab_size = 256, n_positions = 64;  // the family: only n_layer varies
  std::vector<int> stages{0, 1, 2, 3}, ranks{1, 2, 4};
  int max_layers = 64;
};

struct SuiteSpec {
  std::vector<SuiteRun> runs;  // expanded, in file order
  ScalingSpec scaling;
};

// Reads `mode` of the suite file. Unknown keys, wrong types and impossible values are
// errors naming the file, the sweep and the key.
SuiteSpec load_suite(const std::string& path, const std::string& mode);

}  // namespace strata::bench
