// `strata plan`: will it fit, and which stage and offload to use — per-rank bytes per tier
// for every ZeRO stage × offload choice, with an estimated step time and a recommendation.
#include <cstdio>
#include <cxxopts.hpp>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/device.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "model/lora.h"
#include "model/model_spec.h"
#include "train/option_registry.h"
#include "train/planner.h"
#include "train/trainer.h"

namespace strata::cli {

namespace {
constexpr const char* kSharedWithTrain[] = {"device",
                                            "micro-batch",
                                            "seq-len",
                                            "threads",
                                            "reduce-bucket-size",
                                            "allgather-bucket-size",
                                            "param-persistence-threshold",
                                            "prefetch-depth",
                                            "grad-accum",
                                            "grad-clip",
                                            "speculative-step",
                                            "optimizer-state-dtype",
                                            "master-dtype",
                                            "lora-rank",
                                            "lora-targets"};
// Bytes per step over each tier edge for the offloading rows (checkpointing moves the same),
// and the least each edge must carry (zero::StepTraffic): what metrics.jsonl's "bytes" will say.
void print_traffic(const std::vector<PlanRow>& rows) {
  const double GB = 1e9;
  std::printf(
      "\nGB per step per rank between the tiers (metrics.jsonl \"bytes\"), and the least each edge must carry\n");
  std::printf("%-5s %-14s %8s %8s %8s %8s %8s %8s %8s %8s %10s\n", "stage", "offload", "d2h", "h2d", "n2h", "h2n",
              "min d2h", "min h2d", "min n2h", "min h2n", "NVMe × min");
  for (const PlanRow& p : rows) {
    if (p.offload == "none" || p.checkpointing) continue;
    const zero::StepTraffic& t = p.traffic;
    char ratio[16] = "-";
    if (t.min_n2h + t.min_h2n > 0)
      std::snprintf(ratio, sizeof ratio, "%.4f", double(t.n2h + t.h2n) / double(t.min_n2h + t.min_h2n));
    std::printf("%-5d %-14s %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %10s\n", p.stage, p.offload.c_str(),
                double(t.d2h) / GB, double(t.h2d) / GB, double(t.n2h) / GB, double(t.h2n) / GB, double(t.min_d2h) / GB,
                double(t.min_h2d) / GB, double(t.min_n2h) / GB, double(t.min_h2n) / GB, ratio);
  }
}

// --json: the rows with exact byte counts, for scripts (the tables round them).
void print_json(const std::vector<PlanRow>& rows, int recommended) {
  nlohmann::json out = nlohmann::json::array();
  for (const PlanRow& p : rows) {
    const zero::StepTraffic& t = p.traffic;
    out.push_back({{"stage", p.stage},
                   {"offload", p.offload},
                   {"checkpointing", p.checkpointing},
                   {"device_bytes", p.device},
                   {"host_bytes", p.host},
                   {"nvme_bytes", p.nvme},
                   {"fits", p.fits},
                   {"step_s", p.step_s},
                   {"bytes_per_step",
                    {{"d2h", t.d2h},
                     {"h2d", t.h2d},
                     {"n2h", t.n2h},
                     {"h2n", t.h2n},
                     {"min_d2h", t.min_d2h},
                     {"min_h2d", t.min_h2d},
                     {"min_n2h", t.min_n2h},
                     {"min_h2n", t.min_h2n}}}});
  }
  const nlohmann::json j = {{"plan", out}, {"recommended", recommended}};
  std::printf("%s\n", j.dump().c_str());
}

}  // namespace

int plan_main(int argc, char** argv) {
  cxxopts::Options o("strata plan",
                     "Per-rank memory per tier and estimated step time for every ZeRO stage and "
                     "offload choice; recommends the fastest plan that fits.");
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("model",
                  "model config (JSON or Hugging Face directory) or a named size from configs/bench (gpt-1.5b, "
                  "gpt-8b, gpt-20b, ... gpt-170b; scaled/gpt-*): model states, activations, step time",
                  str(""))("params", "parameter count alone (e.g. 7.5e9): model-state rows only", str(""))(
      "ranks", "data-parallel ranks", str("1"))("precision", "bf16 | f16 | f32", str("bf16"))(
      "device-mem", "device capacity per rank (0 = unlimited)", str("0"))(
      "host-mem", "host RAM per rank (0 = unlimited)", str("0"))("nvme-size", "NVMe per rank (0 = unlimited)",
                                                                 str("0"))(
      "device-tflops", "device throughput, TFLOP/s", str("0.1"))("net-gbps", "network GB/s per rank", str("1"))(
      "link-gbps", "host<->device GB/s", str("10"))("host-gbps", "host memory GB/s for CPU Adam", str("10"))(
      "nvme-gbps", "NVMe GB/s", str("1"))(
      "ranks-per-node", "ranks on each node (0 = all ranks on one): shows stage 3's hpZ trade-off across nodes",
      str("0"))("hpz-partition-size", "stage 3: ranks per secondary partition in the rows above (1 = none)", str("1"))(
      "bench",
      "a file of `strata bench` JSON lines (model, comm, nvme, adam): measured throughputs replace the "
      "defaults; flags given still win",
      str(""))("json", "end with one JSON line: every row, exact bytes")("h,help", "show this help");
  // The options strata train has too: declared, parsed and checked by train's registry.
  for (const char* name : kSharedWithTrain) {
    const TrainOption& d = *find_train_option(name);
    o.add_options()(d.name, d.help + " (as strata train)", str(d.default_value));
  }
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "plan", r)) return *done;
  PlanInput in;
  std::vector<std::string> measured;
  try {
    const std::string model = r["model"].as<std::string>(), params = r["params"].as<std::string>();
    if (model.empty() == params.empty()) return usage_error("plan", "give one of --model FILE or --params COUNT");
    in.ranks = parse_int32(r["ranks"].as<std::string>(), "--ranks");
    if (in.ranks < 1) return usage_error("plan", "--ranks must be positive");
    const std::string prec = r["precision"].as<std::string>();
    if (prec != "f32" && prec != "bf16" && prec != "f16")
      return usage_error("plan", "--precision: '" + prec + "' is not f32, bf16 or f16");
    in.mixed = prec != "f32";
    TrainOptions shared;
    for (const char* name : kSharedWithTrain) {
      const TrainOption& d = *find_train_option(name);
      d.set(shared, r[name].as<std::string>());
      d.check(shared);
    }
    in.micro_batch = shared.micro_batch;
    in.seq_len = shared.seq_len;
    in.threads = shared.threads;
    // A plan is made anywhere: --device cuda plans a GPU run on a machine without one.
    in.device = shared.device == DeviceChoice::automatic ? resolve_device("auto") : device_choice_name(shared.device);
    in.reduce_bucket = shared.reduce_bucket_size;
    in.allgather_bucket = shared.allgather_bucket_size;
    in.persistence_threshold = shared.param_persistence_threshold;
    in.prefetch_depth = shared.prefetch_depth;
    in.grad_accum = int(shared.grad_accum);
    in.grad_clip = shared.grad_clip;
    in.speculative_step = shared.speculative_step;
    in.states.moments = shared.optimizer_state_dtype;
    in.states.master = shared.master_dtype;
    in.lora = shared.lora_config();
    if (in.states.master != DType::f32 && prec != "bf16")
      return usage_error("plan", "--master-dtype bf16 needs --precision bf16 (a bf16 master is the compute copy too)");
    in.ranks_per_node = parse_int32(r["ranks-per-node"].as<std::string>(), "--ranks-per-node");
    if (in.ranks_per_node < 0 || (in.ranks_per_node > 0 && in.ranks % in.ranks_per_node != 0))
      return usage_error("plan", "--ranks-per-node must divide --ranks (or be 0: one node)");
    in.hpz_partition_size = parse_int32(r["hpz-partition-size"].as<std::string>(), "--hpz-partition-size");
    if (in.hpz_partition_size < 1 || in.ranks % in.hpz_partition_size != 0)
      return usage_error("plan", "--hpz-partition-size must be a positive divisor of --ranks");
    if (in.threads <= 0) in.threads = int(std::max(1u, std::thread::hardware_concurrency()));
    if (in.lora.enabled() && model.empty())
      return usage_error("plan", "--lora-rank needs --model: the adapters' shapes come from it");
    if (!params.empty()) {
      in.psi = parse_double(params, "--params");
      if (!(in.psi >= 1)) return usage_error("plan", "--params must be at least 1");
    } else {
      const ModelSpec spec = ModelSpec::load(resolve_model(model));
      in.model = spec;
      in.psi = double(spec.num_params());
      in.padded_psi = padded_param_count(spec, in.ranks);  // Ψ' as the engine pads it
    }
    auto bytes = [&](const char* k) { return double(parse_bytes(r[k].as<std::string>(), std::string("--") + k)); };
    in.device_bytes = bytes("device-mem"), in.host_bytes = bytes("host-mem"), in.nvme_bytes = bytes("nvme-size");
    auto rate = [&](const char* k) { return parse_double(r[k].as<std::string>(), std::string("--") + k); };
    in.device_flops = rate("device-tflops") * 1e12, in.net_bw = rate("net-gbps") * 1e9;
    in.link_bw = rate("link-gbps") * 1e9, in.host_bw = rate("host-gbps") * 1e9, in.nvme_bw = rate("nvme-gbps") * 1e9;
    if (const std::string bench = r["bench"].as<std::string>(); !bench.empty()) {
      const PlanInput flags = in;
      measured = apply_bench_results(bench, in);
      // A throughput typed on the command line wins over the measured one.
      for (auto [flag, field] : {std::pair{"device-tflops", &PlanInput::device_flops},
                                 {"net-gbps", &PlanInput::net_bw},
                                 {"host-gbps", &PlanInput::host_bw},
                                 {"nvme-gbps", &PlanInput::nvme_bw}})
        if (r.count(flag)) {
          in.*field = flags.*field;
          measured.push_back(std::string("--") + flag + " from the command line replaces any measured value");
        }
    }
  } catch (const Error& e) {
    return usage_error("plan", e.what_failed() + " (" + e.hint() + ")");
  }
  const std::vector<PlanRow> rows = make_plan(in);
  const double GB = 1e9;
  const bool narrow = in.states.narrow();
  std::string states_note;
  if (narrow)
    states_note = ", optimizer states: master " + std::string(dtype_name(in.states.master)) + ", m and v " +
                  std::string(dtype_name(in.states.moments)) +
                  " (K = " + std::to_string(in.states.master_bytes() + 2 * in.states.moment_bytes()) + ")" +
                  (in.states.master != DType::f32 ? "; stage 0 keeps an f32 master" : "");
  std::printf("strata plan: %.4g parameters, %d rank(s), %s%s%s\n\n", in.psi, in.ranks,
              in.mixed ? "mixed precision (K = 12)" : "f32", states_note.c_str(),
              in.model ? "" : " (model states only: give --model for activations and step time)");
  for (const std::string& m : measured) std::printf("measured: %s\n", m.c_str());
  if (!measured.empty()) std::printf("\n");
  if (in.lora.enabled()) {
    const std::vector<LoraTarget> targets = lora_targets(*in.model, in.lora);
    int64_t trained = 0;
    for (const ParamSpec& s : lora_layout(targets, in.lora.rank, false)) trained += s.shape.numel();
    std::printf(
        "LoRA rank %d on %zu linear layers: %lld trainable parameters; the frozen weights cost their bytes alone "
        "(whole on every rank at stages 0-2, partitioned at stage 3). Offload: the adapters' optimizer in cpu or "
        "nvme; at stage 3, +param puts the frozen weights in host RAM, +param-nvme on NVMe\n\n",
        in.lora.rank, targets.size(), (long long)trained);
  } else {
    std::printf("model states per rank:");
    for (int stage = 0; stage <= 3; ++stage) {
      const ModelStates m = plan_model_states(stage, in.psi, in.padded_psi, in.ranks, in.mixed);
      std::printf("%s stage %d %.1f GB", stage ? "," : "", stage, (m.params + m.grads + m.optim) / GB);
      if (narrow && (stage > 0 || in.states.master == DType::f32)) {
        const ModelStates h = plan_model_states(stage, in.psi, in.padded_psi, in.ranks, in.mixed, in.states);
        const double total = h.params + h.grads + h.optim;
        if (stage == 3 && in.states.master != DType::f32) {
          // On the device a bf16 master is the stage-3 compute shard; offloaded it is a copy.
          const double shard16 = 2.0 * (in.padded_psi > 0 ? in.padded_psi : in.psi) / in.ranks;
          std::printf(" (%.1f GB with these states on the device, %.1f GB offloaded)", (total - shard16) / GB,
                      total / GB);
        } else {
          std::printf(" (%.1f GB with these states)", total / GB);
        }
      }
    }
    std::printf("\n\n");
  }
  std::printf("%-5s %-14s %-5s %10s %10s %10s %10s %10s %10s %10s %5s %9s\n", "stage", "offload", "ckpt", "params GB",
              "grads GB", "optim GB", "act GB", "device GB", "host GB", "nvme GB", "fits", "step s");
  for (const PlanRow& p : rows) {
    char act[32] = "-", step[32] = "-";
    if (p.activations >= 0) std::snprintf(act, sizeof act, "%.3f", p.activations / GB);
    if (p.step_s > 0) std::snprintf(step, sizeof step, "%.3g", p.step_s);
    std::printf("%-5d %-14s %-5s %10.3f %10.3f %10.3f %10s %10.3f %10.3f %10.3f %5s %9s\n", p.stage, p.offload.c_str(),
                p.checkpointing ? "yes" : "no", p.params / GB, p.grads / GB, p.optim / GB, act, p.device / GB,
                p.host / GB, p.nvme / GB, p.fits ? "yes" : "no", step);
  }
  const bool json = r.count("json") > 0;
  if (!in.model) {
    std::printf("\n(give --model for activations, step times and a recommendation)\n");
    if (json) print_json(rows, -1);
    return 0;
  }
  print_traffic(rows);
  if (const std::vector<HpzRow> hpz = plan_hpz(in); !hpz.empty()) {
    const int L = in.ranks_per_node;
    std::printf(
        "\nstage 3 across %d nodes of %d ranks: a secondary partition of K ranks (--hpz-partition-size K) keeps "
        "1/K of the parameters after the forward gather, so backward gathers within the node\n",
        in.ranks / L, L);
    const double MB = 1e6;
    std::printf("%-4s %13s %12s %18s %18s %9s %9s\n", "K", "secondary MB", "device MB", "inter-node MB/step",
                "intra-node MB/step", "vs K = 1", "inter s");
    for (const HpzRow& h : hpz)
      std::printf("%-4d %13.3f %12.3f %18.3f %18.3f %8.0f%% %9.3g\n", h.partition, h.secondary_bytes / MB,
                  h.device_bytes / MB, h.inter_node_bytes / MB, h.intra_node_bytes / MB,
                  100.0 * h.inter_node_bytes / hpz.front().inter_node_bytes, h.inter_node_s);
  }
  const int best = recommend(rows);
  if (best < 0) {
    std::printf("\nnothing fits: add ranks, device memory, host RAM or NVMe\n");
    if (json) print_json(rows, best);
    return 1;
  }
  const PlanRow& b = rows[size_t(best)];
  std::printf(
      "\nrecommended: --zero-stage %d%s%s%s\n", b.stage,
      b.offload == "none" ? "" : (" --offload-optimizer " + b.offload.substr(0, b.offload.find('+'))).c_str(),
      b.offload.ends_with("+param") ? (" --offload-param " + b.offload.substr(0, b.offload.find('+'))).c_str() : "",
      b.checkpointing ? " --activation-checkpointing" : "");
  if (json) print_json(rows, best);
  return 0;
}

}  // namespace strata::cli
