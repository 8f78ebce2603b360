// `strata plan`: per-rank bytes in each tier for every ZeRO stage × offload choice, whether
// it fits, and an estimated step time; the recommendation is the fastest plan that fits.
//
// The model-state columns follow the ZeRO paper's accounting, as the engine allocates its
// states (tested): in mixed precision (bf16/f16) params 2Ψ, grads 2Ψ, optimizer K = 12 (f32
// master, m, v), partitioned by stage — 16Ψ, 4Ψ+12Ψ'/N, 2Ψ+14Ψ'/N, 16Ψ'/N — with Ψ' the
// layout's padded count when a model is given (Ψ otherwise).
//
// With a model, the per-tier totals are what a run allocates, not a formula: the engine's
// buffers from zero::plan_engine and the model's from model_device_bytes (both checked
// against the real allocations on every run), plus an upper bound of the op scratch. The
// staging buffers are added on the host when offloading. With parameters alone, the totals
// are the model states, the optimizer's 12Ψ'/N (and the stage-3 shards) moved by offload.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/op_shapes.h"
#include "model/lora.h"
#include "model/model_spec.h"
#include "zero/defaults.h"
#include "zero/step_traffic.h"
#include "zero/zero_options.h"

namespace strata {

struct PlanInput {
  double psi = 0;                  // parameters
  double padded_psi = 0;           // Ψ' (0: Ψ)
  std::optional<ModelSpec> model;  // for activations (absent: model states only)
  int ranks = 1;
  bool mixed = true;  // bf16/f16 compute (false: f32)
  int micro_batch = 8, seq_len = 128;
  double device_bytes = 0, host_bytes = 0, nvme_bytes = 0;  // per rank; 0 = unlimited
  // Throughputs for the step-time estimate (per rank): device FLOP/s, bytes/s of the
  // network, host<->device link, host memory (CPU Adam) and NVMe.
  double device_flops = 1e11, net_bw = 1e9, link_bw = 1e10, host_bw = 1e10, nvme_bw = 1e9;
  int64_t reduce_bucket = zero::kDefaultBucketElements, allgather_bucket = zero::kDefaultBucketElements,
          pin_buffers = 4, pin_buffer_bytes = 16 << 20;
  int threads = 2;             // the device's threads (per-thread op scratch)
  std::string device = "cpu";  // whose op scratch the device rows carry: cpu or cuda
  // The engine's other sizing options (train's defaults).
  int64_t sub_group_size = zero::kDefaultSubGroupSize, persistence_threshold = zero::kDefaultPersistenceThreshold;
  int prefetch_depth = 2;
  // Nodes: ranks per node (0: all on one), and stage 3's secondary partition (hpZ; 1: none).
  int ranks_per_node = 0;
  int hpz_partition_size = 1;
  // What decides the bytes a step moves between the tiers (train's defaults).
  int grad_accum = 1;
  double grad_clip = 1.0;
  zero::Speculation speculative_step = zero::Speculation::automatic;
  // The optimizer's state dtypes (--master-dtype, --optimizer-state-dtype); rows that
  // keep the optimizer on the device keep an f32 master, as the engine does.
  zero::StateFormat states;
  // Low-rank adapters (--lora-rank, --lora-targets; needs a model): the rows train the
  // adapters over frozen weights, which stages 0-2 keep whole on every rank and stage 3
  // partitions. Their offload choices: none | cpu | nvme (the adapters' optimizer) and, at
  // stage 3, cpu+param (the frozen weights in host RAM too) and cpu+param-nvme (the frozen
  // weights on NVMe).
  LoraConfig lora;
};

struct PlanRow {
  int stage;
  std::string offload;  // none | cpu | nvme | cpu+param | nvme+param
  bool checkpointing;
  double params = 0, grads = 0, optim = 0;  // model-state bytes per rank (wherever they live)
  double device = 0, host = 0, nvme = 0;    // per-rank bytes in each tier (incl. activations, buffers)
  double activations = -1;                  // -1: unknown (no model shape)
  double scratch = 0;                       // the op scratch's upper bound within `device`
  bool fits = true;
  double step_s = 0;  // estimate (0: no model shape)
  // Bytes per step over each tier edge (with a model): what a run's metrics.jsonl reports,
  // but for --offload-activations, which is not a plan row.
  zero::StepTraffic traffic;
};

// Model-state bytes per rank, as the engine allocates them.
struct ModelStates {
  double params, grads, optim;
};
// states: the optimizer's dtypes (f32 by default); a bf16 master costs 2 B, bf16 m and v 4 B.
ModelStates plan_model_states(int stage, double psi, double padded_psi, int ranks, bool mixed,
                              const zero::StateFormat& states = {});

// Throughputs measured by `strata bench` (its final JSON lines, e.g. `strata bench nvme >
// bench.jsonl`): model → device FLOP/s (bf16 row in mixed precision, else f32), comm →
// all-reduce bus bandwidth, nvme → the best row's min(read, write), adam → CPU Adam bytes/s.
// Sets what the file measured into `in` and returns a line per value naming its source.
std::vector<std::string> apply_bench_results(const std::string& path, PlanInput& in);

// The model's parameter table as the trainer hands it to the engine (flat offsets in
// unit_layout's order, each with its weight decay), and elements per unit.
std::pair<std::vector<zero::ParamSpan>, std::vector<int64_t>> param_table(const ModelSpec& spec);
// Ψ' as the engine pads it for `ranks` (the partition layout's element count).
double padded_param_count(const ModelSpec& spec, int ranks, int64_t sub_group_size = zero::kDefaultSubGroupSize);
// Ψ, Ψ' and the shape for a model on `ranks` ranks; the rest of PlanInput at its defaults.
PlanInput plan_input_for(const ModelSpec& spec, int ranks);

// The step's op shapes, for the backend's own scratch bound.
OpShapes op_shapes(const ModelSpec& m, int B, int T, int threads);

std::vector<PlanRow> make_plan(const PlanInput& in);
// make_plan's rows with in.lora (lora_plan.cpp).
std::vector<PlanRow> make_lora_plan(const PlanInput& in);
// The row for a stage, offload (none | cpu | nvme | cpu+param | nvme+param) and
// checkpointing; null when the plan has none (e.g. offload at stage 0).
const PlanRow* find_plan_row(const std::vector<PlanRow>& rows, int stage, const std::string& offload,
                             bool checkpointing);

// Stage 3 across nodes: per rank, what a secondary partition of K ranks costs in device
// memory and what it saves in cross-node traffic per step (zero/comm_volume.h), for K = 1
// (none) and each divisor of the ranks per node. Needs in.model; empty on one node.
struct HpzRow {
  int partition;
  double secondary_bytes, device_bytes;  // device: the stage-3 row without offload, plus the partition
  double inter_node_bytes, intra_node_bytes;
  double inter_node_s;  // the cross-node bytes at in.net_bw
};
std::vector<HpzRow> plan_hpz(const PlanInput& in);
// The fastest row that fits (ties: the least offloaded, then fewer device bytes); -1 if
// none fits.
int recommend(const std::vector<PlanRow>& rows);

}  // namespace strata
