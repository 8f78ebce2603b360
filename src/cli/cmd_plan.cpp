// `strata plan`: will it fit, and which stage and offload to use — per-rank bytes per tier
// for every ZeRO stage × offload choice, with an estimated step time and a recommendation.
#include <cstdio>
#include <cxxopts.hpp>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "model/model_spec.h"
#include "train/planner.h"
#include "train/trainer.h"
#include "zero/defaults.h"

namespace strata::cli {

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
      "micro-batch", "sequences per micro-batch", str("8"))("seq-len", "tokens per sequence", str("128"))(
      "device-mem", "device capacity per rank (0 = unlimited)", str("0"))(
      "host-mem", "host RAM per rank (0 = unlimited)", str("0"))("nvme-size", "NVMe per rank (0 = unlimited)",
                                                                 str("0"))(
      "device-tflops", "device throughput, TFLOP/s", str("0.1"))("net-gbps", "network GB/s per rank", str("1"))(
      "link-gbps", "host<->device GB/s", str("10"))("host-gbps", "host memory GB/s for CPU Adam", str("10"))(
      "nvme-gbps", "NVMe GB/s", str("1"))("threads", "the device's threads (their op scratch; 0 = all CPUs)", str("0"))(
      "reduce-bucket-size", "elements per gradient bucket (as strata train)",
      str(std::to_string(zero::kDefaultBucketElements)))("allgather-bucket-size",
                                                         "elements per parameter all-gather bucket (as strata train)",
                                                         str(std::to_string(zero::kDefaultBucketElements)))(
      "param-persistence-threshold", "stage 3: parameters with fewer elements stay whole (as strata train)",
      str(std::to_string(zero::kDefaultPersistenceThreshold)))(
      "prefetch-depth", "stage 3: units gathered ahead of use (as strata train)", str("2"))(
      "ranks-per-node", "ranks on each node (0 = all ranks on one): shows stage 3's hpZ trade-off across nodes",
      str("0"))("hpz-partition-size", "stage 3: ranks per secondary partition in the rows above (1 = none)", str("1"))(
      "bench",
      "a file of `strata bench` JSON lines (model, comm, nvme, adam): measured throughputs replace the "
      "defaults; flags given still win",
      str(""))("h,help", "show this help");
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
    in.micro_batch = parse_int32(r["micro-batch"].as<std::string>(), "--micro-batch");
    in.threads = parse_int32(r["threads"].as<std::string>(), "--threads");
    in.reduce_bucket = parse_count(r["reduce-bucket-size"].as<std::string>(), "--reduce-bucket-size");
    in.allgather_bucket = parse_count(r["allgather-bucket-size"].as<std::string>(), "--allgather-bucket-size");
    if (in.reduce_bucket < 1 || in.allgather_bucket < 1) return usage_error("plan", "bucket sizes must be positive");
    in.persistence_threshold =
        parse_count(r["param-persistence-threshold"].as<std::string>(), "--param-persistence-threshold");
    in.prefetch_depth = parse_int32(r["prefetch-depth"].as<std::string>(), "--prefetch-depth");
    if (in.prefetch_depth < 0) return usage_error("plan", "--prefetch-depth must not be negative");
    in.ranks_per_node = parse_int32(r["ranks-per-node"].as<std::string>(), "--ranks-per-node");
    if (in.ranks_per_node < 0 || (in.ranks_per_node > 0 && in.ranks % in.ranks_per_node != 0))
      return usage_error("plan", "--ranks-per-node must divide --ranks (or be 0: one node)");
    in.hpz_partition_size = parse_int32(r["hpz-partition-size"].as<std::string>(), "--hpz-partition-size");
    if (in.hpz_partition_size < 1 || in.ranks % in.hpz_partition_size != 0)
      return usage_error("plan", "--hpz-partition-size must be a positive divisor of --ranks");
    if (in.threads <= 0) in.threads = int(std::max(1u, std::thread::hardware_concurrency()));
    in.seq_len = parse_int32(r["seq-len"].as<std::string>(), "--seq-len");
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
  std::printf("strata plan: %.4g parameters, %d rank(s), %s%s\n\n", in.psi, in.ranks,
              in.mixed ? "mixed precision (K = 12)" : "f32",
              in.model ? "" : " (model states only: give --model for activations and step time)");
  for (const std::string& m : measured) std::printf("measured: %s\n", m.c_str());
  if (!measured.empty()) std::printf("\n");
  std::printf("model states per rank:");
  for (int stage = 0; stage <= 3; ++stage) {
    const ModelStates m = plan_model_states(stage, in.psi, in.padded_psi, in.ranks, in.mixed);
    std::printf("%s stage %d %.1f GB", stage ? "," : "", stage, (m.params + m.grads + m.optim) / GB);
  }
  std::printf("\n\n");
  std::printf("%-5s %-11s %-5s %10s %10s %10s %10s %10s %10s %10s %5s %9s\n", "stage", "offload", "ckpt", "params GB",
              "grads GB", "optim GB", "act GB", "device GB", "host GB", "nvme GB", "fits", "step s");
  for (const PlanRow& p : rows) {
    char act[32] = "-", step[32] = "-";
    if (p.activations >= 0) std::snprintf(act, sizeof act, "%.3f", p.activations / GB);
    if (p.step_s > 0) std::snprintf(step, sizeof step, "%.3g", p.step_s);
    std::printf("%-5d %-11s %-5s %10.3f %10.3f %10.3f %10s %10.3f %10.3f %10.3f %5s %9s\n", p.stage, p.offload.c_str(),
                p.checkpointing ? "yes" : "no", p.params / GB, p.grads / GB, p.optim / GB, act, p.device / GB,
                p.host / GB, p.nvme / GB, p.fits ? "yes" : "no", step);
  }
  if (!in.model) {
    std::printf("\n(give --model for activations, step times and a recommendation)\n");
    return 0;
  }
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
    return 1;
  }
  const PlanRow& b = rows[size_t(best)];
  std::printf(
      "\nrecommended: --zero-stage %d%s%s%s\n", b.stage,
      b.offload == "none" ? "" : (" --offload-optimizer " + b.offload.substr(0, b.offload.find('+'))).c_str(),
      b.offload.ends_with("+param") ? (" --offload-param " + b.offload.substr(0, b.offload.find('+'))).c_str() : "",
      b.checkpointing ? " --activation-checkpointing" : "");
  return 0;
}

}  // namespace strata::cli
