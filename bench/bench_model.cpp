#include "bench/bench_model.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/device.h"
#include "bench/bf16_dot_rate.h"
#include "bench/gemm_bound.h"
#include "bench/op_profile.h"
#include "bench/torch_peer.h"
#include "core/error.h"
#include "core/rng.h"
#include "cpu/gemm_bf16.h"
#include "cpu/gemm_lowp.h"
#include "model/model_factory.h"
#include "model/model_spec.h"
#include "train/trainer.h"
#include "zero/adamw.h"

namespace strata::bench {

namespace {

struct Measured {
  double tokens_per_s = 0, step_s = 0;
  std::array<ProfilingBackend::Entry, ProfilingBackend::kOps> ops{};  // of the best step, with --profile
};

Measured measure_strata(const ModelSpec& spec, const ModelBenchOptions& o, DType dtype) {
  const std::unique_ptr<Backend> backend = make_backend(o.device, {size_t(64) << 30, o.threads});
  std::optional<ProfilingBackend> profiled;
  if (o.profile) profiled.emplace(*backend);
  Backend& be = o.profile ? static_cast<Backend&>(*profiled) : *backend;
  Measured out;
  const std::unique_ptr<Model> made = make_model(spec, be, o.micro_batch, o.seq_len, dtype);
  Model& model = *made;
  model.init_weights(1);
  AdamW optim(be, model.num_params(), {});
  const std::vector<AdamW::Group> groups{{0, model.num_params(), true}};
  const size_t BT = size_t(o.micro_batch) * size_t(o.seq_len);
  std::vector<int32_t> tokens(BT), targets(BT);
  Rng rng(7);
  for (size_t i = 0; i < BT; ++i) tokens[i] = int32_t(rng.below(uint64_t(spec.vocab_size())));
  for (size_t i = 0; i < BT; ++i) targets[i] = int32_t(rng.below(uint64_t(spec.vocab_size())));
  double best = 1e30;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (profiled) profiled->reset();
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    model.forward(tokens);
    model.backward(targets, 1.0f, nullptr, 1.0);
    optim.step(model.master_flat().as<float>(), model.grad_flat().data, DType::f32, model.compute_flat().data, dtype,
               groups, 1e-4f, 1.0f, s + 1);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup && dt < best) {
      best = dt;
      if (profiled) out.ops = profiled->entries();
    }
  }
  out.tokens_per_s = double(BT) / best, out.step_s = best;
  return out;
}

// The best step's time by op, largest first; what no op accounts for is the step's own code
// (the model's bookkeeping, the optimizer's host side).
nlohmann::json print_profile(const std::string& precision, const Measured& m) {
  std::vector<int> order;
  for (int i = 0; i < ProfilingBackend::kOps; ++i)
    if (m.ops[size_t(i)].calls) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return m.ops[size_t(a)].seconds > m.ops[size_t(b)].seconds; });
  std::printf("profile (%s), the best step, %.1f ms:\n%-18s %7s %10s %8s %10s\n", precision.c_str(), m.step_s * 1e3,
              "op", "calls", "ms", "share", "GFLOP/s");
  nlohmann::json rows = nlohmann::json::array();
  double in_ops = 0;
  for (const int i : order) {
    const ProfilingBackend::Entry& e = m.ops[size_t(i)];
    in_ops += e.seconds;
    const double gf = e.flops > 0 ? e.flops / e.seconds * 1e-9 : 0;
    std::printf("%-18s %7lld %10.2f %7.1f%% %10.1f\n", ProfilingBackend::op_name(i), (long long)e.calls,
                e.seconds * 1e3, 100 * e.seconds / m.step_s, gf);
    nlohmann::json r = {{"op", ProfilingBackend::op_name(i)},
                        {"calls", e.calls},
                        {"seconds", e.seconds},
                        {"share", e.seconds / m.step_s}};
    if (gf > 0) r["gflops"] = gf;
    rows.push_back(r);
  }
  const double rest = std::max(0.0, m.step_s - in_ops);
  std::printf("%-18s %7s %10.2f %7.1f%%\n", "(outside ops)", "", rest * 1e3, 100 * rest / m.step_s);
  rows.push_back({{"op", "(outside ops)"}, {"seconds", rest}, {"share", rest / m.step_s}});
  return rows;
}

// The OpenBLAS core the peer runs: OpenBLAS 0.3.21 (Debian 12) takes CPUs it does not know
// for "Prescott" and runs its SSE3 kernels — on an Intel Xeon with AVX512-BF16 its sgemm, and
// with it PyTorch's GPT-2 step, ran several times slower than as "Cooperlake". So unless the
// user chose one, the peer gets the newest core this CPU can run ("" leaves OpenBLAS to choose).
std::string openblas_core() {
  if (const char* e = std::getenv("OPENBLAS_CORETYPE"); e && *e) return e;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vl")) return "Cooperlake";
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

// PyTorch's bf16 autocast runs natively only with AVX512-BF16 or AMX; elsewhere it is far
// slower than its f32 and cannot be the fastest configuration, so by default it is not run.
std::string default_peer_precisions() {
  return cpu::gemm_bf16_supported() || !cpu::lowp_gemm_amx_impl().empty() ? "f32,bf16" : "f32";
}

}  // namespace

int run_model_bench(const ModelBenchOptions& o) {
  const std::string config_path = resolve_resource(o.model);
  STRATA_CHECK(!o.profile || resolve_device(o.device) == "cpu",
               "--profile: ops on a device with asynchronous streams cannot be timed from the host",
               "profile with --device cpu");
  const ModelSpec spec = ModelSpec::load(config_path);
  int threads = o.threads;
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#endif
  const double fpt = spec.training_flops_per_token(o.seq_len, false);
  std::optional<TorchPeer> torch_peer;
  if (o.peer != "none") torch_peer = find_torch_peer(o.python);
  STRATA_CHECK(o.peer != "torch" || torch_peer,
               "--peer torch: " + (o.python.empty() ? "no Python with torch (looked in " + peers_dir() +
                                                          "/venv/bin/python and /usr/bin/python3)"
                                                    : "'" + o.python + "' cannot import torch"),
               "run tools/setup-peers.sh (PyTorch 2 from PyPI), or apt-get install python3-torch libopenblas0-openmp");
  std::printf("bench model: %s L=%d d=%d vocab=%d (%.1fM parameters), B=%d T=%d, %d threads, %.2f GFLOP/token-step\n",
              spec.family->display_name().c_str(), spec.n_layer(), spec.n_embd(), spec.vocab_size(),
              double(spec.num_params()) * 1e-6, o.micro_batch, o.seq_len, threads, fpt * 1e-9);
  nlohmann::json result = {{"bench", "model"},
                           {"threads", threads},
                           {"batch", o.micro_batch},
                           {"seq_len", o.seq_len},
                           {"flops_per_token", fpt}};
  auto split = [](std::string s) {
    std::vector<std::string> out;
    s += ",";
    for (size_t pos; (pos = s.find(',')) != std::string::npos; s.erase(0, pos + 1))
      if (pos) out.push_back(s.substr(0, pos));
    return out;
  };
  // Which path 16-bit GEMMs take on this CPU, and why (cpu/gemm_path.h).
  const std::string path(cpu::lowp_gemm_name(cpu::lowp_gemm_mode()));
  result["gemm_path_16bit"] = path;
  const std::string amx = cpu::lowp_gemm_amx_impl();
  if (!amx.empty()) result["amx_impl"] = amx;
  if (!amx.empty() && cpu::lowp_gemm_mode() == cpu::LowpGemm::onednn) {
    std::printf("16-bit GEMMs: %s (AMX: %s)\n", path.c_str(), amx.c_str());
  } else if (cpu::gemm_bf16_supported()) {
    result["bf16_dot_speedup"] = bf16_dot_speedup();
    std::printf("16-bit GEMMs: %s (AVX512-BF16's dot products at %.2f× the f32 multiply-add rate)\n", path.c_str(),
                double(result["bf16_dot_speedup"]));
  } else {
    std::printf("16-bit GEMMs: %s (no AVX512-BF16)\n", path.c_str());
  }
  const auto peer_list = split(o.peer_precisions == "auto" ? default_peer_precisions() : o.peer_precisions);
  std::vector<bool> modes;  // compile or not
  for (const std::string& m : split(o.peer_modes == "auto" ? std::string("eager,compile") : o.peer_modes)) {
    STRATA_CHECK(m == "eager" || m == "compile", "--peer-mode " + m + ": not eager or compile",
                 "--peer-mode eager,compile");
    if (m == "eager" || (torch_peer && torch_peer->torch2)) modes.push_back(m == "compile");
  }
  const std::string core = torch_peer ? openblas_core() : "";
  if (torch_peer) {
    std::printf("torch peer: %s, torch %s (%s)\n", torch_peer->python.c_str(), torch_peer->version.c_str(),
                torch_peer->source.c_str());
    if (!torch_peer->torch2)
      std::printf("  (torch %s has no torch.compile, SDPA or fused AdamW: eager only)\n", torch_peer->version.c_str());
  }
  // Every PyTorch configuration first, so each Strata precision compares with all of them.
  struct PeerRun {
    std::string dtype;
    bool compile;
    TorchRun run;
  };
  std::vector<PeerRun> peer_runs;
  const PeerRun* fastest = nullptr;
  if (torch_peer)
    for (const std::string& dtype : peer_list)
      for (const bool compile : modes) {
        TorchRunSpec ts{config_path, dtype, compile, o.micro_batch, o.seq_len, o.steps, o.warmup + (compile ? 1 : 0),
                        threads,     core};
        peer_runs.push_back({dtype, compile, run_torch_peer(*torch_peer, ts)});
        const PeerRun& pr = peer_runs.back();
        if (pr.run.tokens_per_s <= 0)
          std::printf("  torch peer (%s): %s\n", TorchRun::name(dtype, compile).c_str(), pr.run.error.c_str());
        else
          std::printf("  torch %-14s %10.1f tok/s\n", TorchRun::name(dtype, compile).c_str(), pr.run.tokens_per_s);
      }
  for (const PeerRun& pr : peer_runs)
    if (pr.run.tokens_per_s > 0 && (!fastest || pr.run.tokens_per_s > fastest->run.tokens_per_s)) fastest = &pr;
  // The fastest PyTorch configuration in one dtype.
  auto fastest_in = [&](const std::string& dtype) {
    const PeerRun* best = nullptr;
    for (const PeerRun& pr : peer_runs)
      if (pr.dtype == dtype && pr.run.tokens_per_s > 0 && (!best || pr.run.tokens_per_s > best->run.tokens_per_s))
        best = &pr;
    return best;
  };
  struct Row {
    std::string name;
    Measured m;
    GemmBound bound;
  };
  std::vector<Row> rows;
  for (const std::string& name : split(o.precisions))
    rows.push_back({name, measure_strata(spec, o, parse_dtype(name)),
                    measure_gemm_bound(spec, o.micro_batch, o.seq_len, parse_dtype(name))});
  std::printf("%-6s %14s %12s %12s %10s %14s %16s %10s %14s\n", "dtype", "strata tok/s", "GFLOP/s", "bound GF/s",
              "bound ×", "torch tok/s", "torch config", "ratio", "vs torch best");
  for (const Row& r : rows) {
    const PeerRun* same = fastest_in(r.name);
    const double peer = same ? same->run.tokens_per_s : 0;
    const double ratio = peer > 0 ? r.m.tokens_per_s / peer : 0;
    const double vs_best = fastest ? r.m.tokens_per_s / fastest->run.tokens_per_s : 0;
    const double gflops = r.m.tokens_per_s * fpt * 1e-9, bound_ratio = gflops / r.bound.gflops;
    std::printf("%-6s %14.1f %12.1f %12.1f %10.3f %14.1f %16s %10.2f %14.2f\n", r.name.c_str(), r.m.tokens_per_s,
                gflops, r.bound.gflops, bound_ratio, peer,
                same ? TorchRun::name(same->dtype, same->compile).c_str() : "-", ratio, vs_best);
    auto& j = result[r.name];
    j = {{"tokens_per_s", r.m.tokens_per_s}, {"gflops", gflops},           {"step_s", r.m.step_s},
         {"bound_gflops", r.bound.gflops},   {"bound_ratio", bound_ratio}, {"bound_impl", r.bound.impl}};
    if (o.profile) j["profile"] = print_profile(r.name, r.m);
    if (same)
      j["torch_tokens_per_s"] = peer, j["torch_gflops"] = peer * fpt * 1e-9, j["ratio_vs_torch"] = ratio,
      j["torch_config"] = TorchRun::name(same->dtype, same->compile);
    if (fastest)
      j["ratio_vs_torch_fastest"] = vs_best, j["torch_fastest"] = TorchRun::name(fastest->dtype, fastest->compile);
  }
  if (torch_peer) {
    nlohmann::json tp = {
        {"python", torch_peer->python}, {"source", torch_peer->source}, {"torch", torch_peer->version}};
    nlohmann::json runs = nlohmann::json::array();
    for (const PeerRun& pr : peer_runs) {
      nlohmann::json rj = {
          {"config", TorchRun::name(pr.dtype, pr.compile)}, {"dtype", pr.dtype}, {"compile", pr.compile}};
      if (pr.run.tokens_per_s > 0) {
        rj["tokens_per_s"] = pr.run.tokens_per_s, rj["step_s"] = pr.run.step_s;
        for (const char* k : {"sdpa", "adamw", "autocast", "first_step_s"})
          if (pr.run.report.contains(k)) rj[k] = pr.run.report[k];
        // What the library reports about itself is the same in every run: kept once.
        for (const char* k : {"blas", "cpu_capability", "onednn", "onednn_isa", "mkl", "mkl_isa"})
          if (pr.run.report.contains(k)) tp[k] = pr.run.report[k];
      } else {
        rj["error"] = pr.run.error;
      }
      runs.push_back(rj);
    }
    tp["runs"] = runs;
    if (tp.value("blas", "") == "openblas") tp["openblas_core"] = core.empty() ? "auto" : core;
    if (fastest) tp["fastest"] = TorchRun::name(fastest->dtype, fastest->compile);
    result["torch_peer"] = tp;
    result["torch_version"] = torch_peer->version;
    result["torch_blas"] = tp.value("blas", "unknown");
  }
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace strata::bench
