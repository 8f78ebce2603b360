#include "train/planner.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace strata {

ModelStates plan_model_states(int stage, double psi, double padded_psi, int ranks, bool mixed) {
  const double part = (padded_psi > 0 ? padded_psi : psi) / ranks;
  // Mixed: 2-byte compute params and grads, f32 master + m + v (K = 12). f32: the master is
  // the parameter (4 B), 4-byte grads, m + v (8 B), and partitioned stages keep a separate
  // f32 master shard beside the replicated parameters (the engine's layout).
  const double p = mixed ? 2 : 4, g = mixed ? 2 : 4;
  switch (stage) {
    case 0:
      return {mixed ? (p + 4) * psi : p * psi, g * psi, 8 * psi};
    case 1:
      return {p * psi + 4 * part, g * psi, 8 * part};
    case 2:
      return {p * psi + 4 * part, g * part, 8 * part};
    default:  // f32: the partitioned master is the parameter
      return {mixed ? (p + 4) * part : p * part, g * part, 8 * part};
  }
}

namespace {

// Bytes of activations per rank for one micro-batch, as the model's arena holds them.
// Per layer and token: GPT-2 keeps ~17·C values (ln1, qkv 3C, attention out, proj, residual,
// ln2, fc 4C, gelu 4C, proj, residual) plus f32 statistics; Llama ~ (6 + 2·kv/heads)·C + 3·I.
// With checkpointing: one layer's output per layer plus one full layer for the recompute.
double activation_bytes(const ModelSpec& m, int B, int T, bool mixed, bool checkpointing) {
  const double a = mixed ? 2 : 4, BT = double(B) * T, C = m.n_embd(), L = m.n_layer();
  double per_layer;
  if (m.arch == "llama") {
    const double kv = double(m.llama.n_kv_head) / m.llama.n_head, I = m.llama.intermediate;
    per_layer = BT * ((6 + 2 * kv) * C + 3 * I) * a + BT * 3 * 4;
  } else {
    per_layer = BT * 17 * C * a + BT * 5 * 4;
  }
  const double logits = BT * m.padded_vocab_size() * 4, embed = BT * C * a, scratch = 4 * BT * 4 * C * a;
  const double layers = checkpointing ? L * BT * C * a + per_layer : L * per_layer;
  return layers + logits + embed + scratch;
}

}  // namespace

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

std::vector<PlanRow> make_plan(const PlanInput& in) {
  std::vector<PlanRow> rows;
  const int N = in.ranks;
  const double psi = in.psi, part = (in.padded_psi > 0 ? in.padded_psi : psi) / N;
  const double tokens = double(in.micro_batch) * in.seq_len;
  const double buffers = double(in.pin_buffers) * double(in.pin_buffer_bytes);
  for (int stage = 0; stage <= 3; ++stage)
    for (const char* off : {"none", "cpu", "nvme", "cpu+param", "nvme+param"})
      for (bool ckpt : {false, true}) {
        const std::string o = off;
        if (stage == 0 && o != "none") continue;
        if (o.ends_with("+param") && stage != 3) continue;
        if (!in.model && ckpt) continue;  // no shape: activations unknown
        PlanRow r{stage, o, ckpt};
        const ModelStates ms = plan_model_states(stage, psi, in.padded_psi, N, in.mixed);
        r.params = ms.params, r.grads = ms.grads, r.optim = ms.optim;
        // The f32 master shard moves with the optimizer (in f32 stage 3 it is the parameter).
        const double master = in.mixed || stage < 3 ? 4 * part : 0;
        double dev = r.params + r.grads + r.optim, host = 0, nvme = 0;
        if (o != "none") {  // the f32 master, m and v leave the device
          dev -= r.optim + master;
          (o.starts_with("cpu") ? host : nvme) += r.optim + master;
          if (o.starts_with("nvme")) host += 3 * std::min(part, 1e8) * 4;  // the swap ring's slots
          host += buffers;
        }
        if (o.ends_with("+param")) {  // stage-3 compute shards too; two layers live on the device
          const double p16 = (in.mixed ? 2 : 4) * part;
          dev -= p16;
          (o.starts_with("cpu") ? host : nvme) += p16;
          if (in.model) dev += 2 * (in.mixed ? 2 : 4) * psi / in.model->n_layer();
        }
        if (stage >= 2) dev += 2 * double(std::min<int64_t>(in.reduce_bucket, int64_t(psi))) * (in.mixed ? 2 : 4) / N;
        if (in.model) {
          r.activations = activation_bytes(*in.model, in.micro_batch, in.seq_len, in.mixed, ckpt);
          dev += r.activations;
          // Step time: the engines overlap, so the slowest one bounds it (6Ψ FLOP per token,
          // 8Ψ with recomputation; ring volume 2Ψ or 3Ψ; offload traffic and CPU Adam).
          const double compute = (ckpt ? 8 : 6) * psi * tokens / in.device_flops;
          const double elem = in.mixed ? 2 : 4;
          const double comm = N > 1 ? (stage == 3 ? 3 : 2) * psi * elem * (N - 1) / N / in.net_bw : 0;
          double link = 0, adam = 0, disk = 0;
          if (o != "none") {
            link = 2 * part * elem / in.link_bw;  // gradients down, parameters up
            adam = part * 32 / in.host_bw;        // master, m, v, grad in; master, m, v, param out
            if (o.starts_with("nvme")) disk = 2 * 12 * part / in.nvme_bw;
          }
          if (o.ends_with("+param")) link += 2 * part * elem / in.link_bw;
          r.step_s = std::max({compute, comm, link, adam, disk});
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
