#include "train/planner.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "backend/device.h"
#include "core/error.h"
#include "model/model_factory.h"
#include "zero/comm_volume.h"
#include "zero/engine_plan.h"
#include "zero/partition.h"

namespace strata {

ModelStates plan_model_states(int stage, double psi, double padded_psi, int ranks, bool mixed,
                              const zero::StateFormat& states) {
  const double part = (padded_psi > 0 ? padded_psi : psi) / ranks;
  // Mixed: 2-byte compute params and grads, f32 master + m + v (K = 12). f32: the master is
  // the parameter (4 B), 4-byte grads, m + v (8 B), and partitioned stages keep a separate
  // f32 master shard beside the replicated parameters (the engine's layout). 16-bit
  // states: a bf16 master is 2 B and bf16 m + v 4 B (K = 6 with both).
  const double p = mixed ? 2 : 4, g = mixed ? 2 : 4;
  const double w = double(states.master_bytes()), mv = 2.0 * double(states.moment_bytes());
  switch (stage) {
    case 0:
      return {mixed ? (p + w) * psi : p * psi, g * psi, mv * psi};
    case 1:
      return {p * psi + w * part, g * psi, mv * part};
    case 2:
      return {p * psi + w * part, g * part, mv * part};
    default:  // f32: the partitioned master is the parameter
      return {mixed ? (p + w) * part : p * part, g * part, mv * part};
  }
}

OpShapes op_shapes(const ModelSpec& m, int B, int T, int threads) {
  OpShapes s;
  s.batch = B, s.seq_len = T, s.width = m.n_embd(), s.threads = threads;
  s.padded_vocab = m.padded_vocab_size();
  const LayerWidths w = m.family->layer_widths(m);
  s.widest = w.widest, s.n_head = w.n_head, s.head_dim = w.head_dim, s.qkv_width = w.qkv_width;
  s.rope_tables = w.rope_tables;
  return s;
}

std::vector<std::string> apply_bench_results(const std::string& path, PlanInput& in) {
  std::ifstream f(path);
  STRATA_CHECK(f.good(), "cannot open bench results '" + path + "'",
               "save a bench's output, e.g. strata bench nvme > bench.jsonl");
  std::vector<std::string> used;
  std::string line;
  auto note = [&](const char* what, double v, const char* unit, double scale, const std::string& bench) {
    char b[160];
    std::snprintf(b, sizeof b, "%s %.3g %s (strata bench %s, %s)", what, v / scale, unit, bench.c_str(), path.c_str());
    used.push_back(b);
  };
  for (int64_t no = 1; std::getline(f, line); ++no) {
    if (line.empty() || line[0] != '{') continue;  // the benches' tables around their JSON lines
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("bench") || !j["bench"].is_string()) continue;
    const std::string b = j["bench"].get<std::string>();
    try {
      if (b == "model") {
        const char* row = in.mixed && j.contains("bf16") ? "bf16" : "f32";
        if (j.contains(row))
          in.device_flops = j[row].at("gflops").get<double>() * 1e9,
          note("device", in.device_flops, "TFLOP/s", 1e12, b);
      } else if (b == "comm" && j.contains("all_reduce_peak_busbw_gbps")) {
        in.net_bw = j["all_reduce_peak_busbw_gbps"].get<double>() * 1e9, note("network", in.net_bw, "GB/s", 1e9, b);
      } else if (b == "nvme" && j.contains("rows")) {
        double best = 0;
        for (const auto& r : j["rows"])
          best = std::max(best, std::min(r.at("read_bps").get<double>(), r.at("write_bps").get<double>()));
        if (best > 0) in.nvme_bw = best, note("NVMe", best, "GB/s", 1e9, b);
      } else if (b == "adam" && j.contains("gbytes_per_s")) {
        in.host_bw = j["gbytes_per_s"].get<double>() * 1e9, note("CPU Adam", in.host_bw, "GB/s", 1e9, b);
      }
    } catch (const nlohmann::json::exception& e) {
      throw_error("bench results '" + path + "', line " + std::to_string(no) + ": " + e.what(),
                  "give the unedited output of strata bench");
    }
  }
  return used;
}

std::pair<std::vector<zero::ParamSpan>, std::vector<int64_t>> param_table(const ModelSpec& spec) {
  std::vector<zero::ParamSpan> table;
  std::vector<int64_t> units(size_t(spec.n_layer()) + 2, 0);
  int64_t off = 0;
  for (const ParamSpec& s : unit_layout(spec)) {
    table.push_back({s.name, s.unit, off, s.shape.numel(), false, s.weight_decay});
    off += s.shape.numel();
    units[size_t(s.unit)] += s.shape.numel();
  }
  return {table, units};
}

double padded_param_count(const ModelSpec& spec, int ranks, int64_t sub_group_size) {
  return double(zero::PartitionLayout(param_table(spec).first, ranks, sub_group_size).padded_elements());
}

const PlanRow* find_plan_row(const std::vector<PlanRow>& rows, int stage, const std::string& offload,
                             bool checkpointing) {
  for (const PlanRow& r : rows)
    if (r.stage == stage && r.offload == offload && r.checkpointing == checkpointing) return &r;
  return nullptr;
}

PlanInput plan_input_for(const ModelSpec& spec, int ranks) {
  PlanInput in;
  in.model = spec;
  in.psi = double(spec.num_params());
  in.padded_psi = padded_param_count(spec, ranks, in.sub_group_size);
  in.ranks = ranks;
  return in;
}

std::vector<HpzRow> plan_hpz(const PlanInput& in) {
  std::vector<HpzRow> out;
  const int L = in.ranks_per_node > 0 ? in.ranks_per_node : in.ranks;
  if (!in.model || L >= in.ranks || in.ranks % L != 0) return out;
  auto [table, units] = param_table(*in.model);
  for (zero::ParamSpan& p : table) p.persistent = p.count < in.persistence_threshold;
  const zero::PartitionLayout lay(table, in.ranks, in.sub_group_size);
  PlanInput base = in;
  base.hpz_partition_size = 1;
  const double device = find_plan_row(make_plan(base), 3, "none", false)->device;
  const size_t esz = in.mixed ? 2 : 4;
  for (int K = 1; K <= L; ++K) {
    if (L % K != 0) continue;
    const zero::Stage3Traffic t = zero::stage3_traffic(lay, esz, L, K, 1);
    out.push_back({K, t.secondary_bytes, device + t.secondary_bytes, t.inter(), t.intra(), t.inter() / in.net_bw});
  }
  return out;
}

std::vector<PlanRow> make_plan(const PlanInput& in) {
  if (in.lora.enabled()) return make_lora_plan(in);
  std::vector<PlanRow> rows;
  const int N = in.ranks;
  const double psi = in.psi, part = (in.padded_psi > 0 ? in.padded_psi : psi) / N;
  const double tokens = double(in.micro_batch) * in.seq_len;
  const uint64_t staging_buffer = uint64_t(in.pin_buffer_bytes + 4095) / 4096 * 4096;  // page-rounded, as allocated
  const double buffers = double(in.pin_buffers) * double(staging_buffer);
  std::vector<zero::ParamSpan> table;
  std::vector<int64_t> units;
  if (in.model) std::tie(table, units) = param_table(*in.model);
  for (int stage = 0; stage <= 3; ++stage)
    for (const char* off : {"none", "cpu", "nvme", "cpu+param", "nvme+param"})
      for (bool ckpt : {false, true}) {
        const std::string o = off;
        if (stage == 0 && o != "none") continue;
        if (o.ends_with("+param") && stage != 3) continue;
        if (!in.model && ckpt) continue;  // no shape: activations unknown
        PlanRow r;
        r.stage = stage, r.offload = o, r.checkpointing = ckpt;
        // bf16 moments in every row; a bf16 master (only with 16-bit compute) at stages 1-3:
        // stage 0's master is the model's own f32 parameters.
        zero::StateFormat states;
        states.moments = in.states.moments;
        if (stage > 0 && in.mixed) states.master = in.states.master;
        const ModelStates ms = plan_model_states(stage, psi, in.padded_psi, N, in.mixed, states);
        r.params = ms.params, r.grads = ms.grads, r.optim = ms.optim;
        const double elem = in.mixed ? 2 : 4;
        // At stage 3 a 16-bit master beside the compute shard (on the device, or with it on
        // the host) is the compute shard itself.
        if (stage == 3 && (o == "none" || o.ends_with("+param")) && in.mixed && states.master != DType::f32)
          r.params -= elem * part;
        double dev = 0, host = 0, nvme = 0;
        if (in.model) {
          // Exactly what the engine and the model allocate (both check it), plus the op scratch.
          zero::ZeroOptions zo;
          zo.stage = stage, zo.reduce_bucket_size = in.reduce_bucket, zo.allgather_bucket_size = in.allgather_bucket;
          zo.offload_optimizer = o != "none", zo.offload_param = o.ends_with("+param"), zo.nvme = o.starts_with("nvme");
          zo.sub_group_size = in.sub_group_size, zo.param_persistence_threshold = in.persistence_threshold;
          zo.prefetch_depth = in.prefetch_depth;
          zo.states = states;
          zo.speculative_step = zero::speculative_step_for(in.speculative_step, zo.nvme, in.grad_clip);
          if (stage == 3) zo.hpz_partition_size = in.hpz_partition_size;
          const DType dt = in.mixed ? DType::bf16 : DType::f32;
          // The engine plans with what the host budget leaves after the staging buffers.
          const double host_free = in.host_bytes > 0 ? std::max(0.0, in.host_bytes - (o != "none" ? buffers : 0)) : -1;
          const zero::EnginePlan f = zero::plan_engine(
              {table, units, N, dt, zo, staging_buffer, 4096, host_free < 0 ? UINT64_MAX : uint64_t(host_free)});
          r.traffic = zero::step_traffic(f, in.grad_accum);
          const ModelStorage storage{stage < 3, false, stage == 0, ckpt, nullptr};
          const double model_bytes = double(model_device_bytes(*in.model, in.micro_batch, in.seq_len, dt, storage));
          r.activations = double(
              model_device_bytes(*in.model, in.micro_batch, in.seq_len, dt, ModelStorage{false, false, false, ckpt}));
          r.scratch = op_scratch_bytes(in.device, op_shapes(*in.model, in.micro_batch, in.seq_len, in.threads));
          dev = double(f.device_bytes()) + model_bytes + r.scratch;
          host = double(f.host_bytes()) + (o != "none" ? buffers : 0);
          nvme = double(f.nvme_bytes());
          // Step time: the engines overlap, so the slowest one bounds it (6Ψ FLOP per token,
          // 8Ψ with recomputation; ring volume 2Ψ or 3Ψ; offload traffic and CPU Adam).
          const double compute = in.model->training_flops_per_token(in.seq_len, ckpt) * tokens / in.device_flops;
          const double comm = N > 1 ? (stage == 3 ? 3 : 2) * psi * elem * (N - 1) / N / in.net_bw : 0;
          const double link = double(r.traffic.d2h + r.traffic.h2d) / in.link_bw;
          const double disk = double(r.traffic.n2h + r.traffic.h2n) / in.nvme_bw;
          // CPU Adam: master, m, v, grad in; master, m, v, param out.
          const double state_bytes = double(states.master_bytes() + 2 * states.moment_bytes());
          const double adam = o != "none" ? part * (2 * state_bytes + 2 * elem) / in.host_bw : 0;
          r.step_s = std::max({compute, comm, link, adam, disk});
        } else {
          // Parameters alone: the paper's model states; offload moves the f32 master, m and v
          // (and, with parameters, the stage-3 compute shards) off the device.
          const double master = in.mixed || stage < 3 ? double(states.master_bytes()) * part : 0;
          dev = r.params + r.grads + r.optim;
          if (o != "none") {
            dev -= r.optim + master;
            (o.starts_with("cpu") ? host : nvme) += r.optim + master;
            host += buffers;
          }
          if (o.ends_with("+param")) {
            dev -= elem * part;  // a 16-bit master is already these parameters
            if (states.master == DType::f32 || !in.mixed) (o.starts_with("cpu") ? host : nvme) += elem * part;
          }
        }
        r.device = dev, r.host = host, r.nvme = nvme;
        r.fits = (in.device_bytes <= 0 || dev <= in.device_bytes) && (in.host_bytes <= 0 || host <= in.host_bytes) &&
                 (in.nvme_bytes <= 0 || nvme <= in.nvme_bytes);
        rows.push_back(r);
      }
  return rows;
}

int recommend(const std::vector<PlanRow>& rows) {
  int best = -1;
  for (int i = 0; i < int(rows.size()); ++i) {
    if (!rows[size_t(i)].fits) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const PlanRow &a = rows[size_t(i)], &b = rows[size_t(best)];
    // Ties (the same bound engine): the plan that moves less off the device.
    const double a_off = a.host + a.nvme, b_off = b.host + b.nvme;
    if (a.step_s < b.step_s || (a.step_s == b.step_s && (a_off < b_off || (a_off == b_off && a.device < b.device))))
      best = i;
  }
  return best;
}

}  // namespace strata
