// What the ZeRO engine is asked to do: the stage, its buckets and stage-3 knobs, and the
// tiers its optimizer and parameters live in. Each option's range is checked where users
// give it (strata train's option registry); check_zero_options checks what only the engine
// knows — the combinations of stage, offload and hpZ, and the world size — for the engine
// and for strata plan alike.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "io/nvme_store.h"
#include "zero/defaults.h"

namespace strata::zero {

struct StagePolicy {
  bool optimizer_states, gradients, parameters;  // what is partitioned
  static StagePolicy for_stage(int stage);
};

// The dtypes of the host's optimizer states and how a 16-bit state is rounded. m and v
// in bf16 halve their bytes; a bf16 master (with --precision bf16) is the compute copy too,
// so a parameter costs 2 + 2 + 2 bytes of state instead of 4 + 4 + 4 (+ 2).
// --state-rounding: how a 16-bit optimizer state is rounded after each update.
enum class StateRounding { stochastic, nearest };

struct StateFormat {
  DType master = DType::f32;   // --master-dtype f32 | bf16
  DType moments = DType::f32;  // --optimizer-state-dtype f32 | bf16 (m and v)
  bool stochastic = true;      // --state-rounding stochastic | nearest
  uint64_t seed = 0;           // the run's --seed: the stochastic rounding's randomness
  bool narrow() const { return master != DType::f32 || moments != DType::f32; }
  // The master's dtype for a parameter: with a bf16 master, parameters without weight decay
  // (norm gains, biases: a few per mille of a model) keep theirs in f32. Gains sit near 1.0,
  // where bf16's spacing is 2^-8 to 2^-7, several Adam steps wide, so a bf16 master moves
  // them by whole (stochastic) steps; an f32 master costs 4 B more per such parameter.
  DType master_of(bool weight_decay) const { return weight_decay ? master : DType::f32; }
  size_t master_bytes() const { return dtype_size(master); }
  size_t moment_bytes() const { return dtype_size(moments); }
};

struct ZeroOptions {
  int stage = 0;
  int64_t sub_group_size = kDefaultSubGroupSize;           // elements per partitioned sub-group
  int64_t reduce_bucket_size = kDefaultBucketElements;     // elements (all ranks) per reduce-scatter / all-reduce
  int64_t allgather_bucket_size = kDefaultBucketElements;  // elements (all ranks) per parameter all-gather (stages 1-2)
  int prefetch_depth = 2;                                  // stage 3: units gathered ahead of use
  int64_t param_persistence_threshold = kDefaultPersistenceThreshold;  // stage 3: smaller parameters stay whole
  int64_t max_live_params = 0;  // stage 3: gathered elements at once (0: from the prefetch depth)
  int hpz_partition_size = 1;   // stage 3: ranks per secondary partition (1: none)
  bool overlap_comm = true;     // communication on its own stream
  // Tiers. The optimizer (master, m, v) of the top `offload_ratio` of this rank's shard
  // lives in host RAM and is updated there by the CPU Adam; stage 3 can keep its parameter
  // shard in host RAM too (then the whole optimizer is offloaded).
  bool offload_optimizer = false;  // --offload-optimizer cpu
  double offload_ratio = 1.0;      // --offload-ratio
  bool offload_param = false;      // --offload-param cpu (stage 3)
  bool speculative_step = true;    // host Adam during backward, rolled back when needed (resolved: see below)
  int host_threads = 1;            // CPU Adam threads on the host side
  // The offloaded states live on NVMe (swap files under nvme.dir) instead of host RAM.
  bool nvme = false;
  io::NvmeOptions nvme_options;
  StateFormat states;  // the host optimizer's state dtypes
};

// --speculative-step auto: speculate unless the states are on NVMe and clipping is on. A
// clipped step (most steps of most runs, at --grad-clip 1) redoes the speculative update,
// which in RAM costs CPU time but on NVMe reads and writes every state twice.
// --offload-optimizer, --offload-param, --offload-activations: where a kind of state lives
// when it is not on the device.
enum class OffloadTier { none, cpu, nvme };

// --speculative-step: auto (speculate unless the states are on NVMe and clipping is on), or
// always, or never.
enum class Speculation { automatic, on, off };
inline bool speculative_step_for(Speculation mode, bool nvme, double grad_clip) {
  return mode == Speculation::on || (mode == Speculation::automatic && !(nvme && grad_clip > 0));
}

// Throws, naming the options and what to do, when they cannot run together on `world` ranks.
void check_zero_options(const ZeroOptions& options, int world);

}  // namespace strata::zero
