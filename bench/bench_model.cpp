#include "bench/bench_model.h"

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/device.h"
#include "bench/bf16_dot_rate.h"
#include "bench/gemm_bound.h"
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
};

Measured measure_strata(const ModelSpec& spec, const ModelBenchOptions& o, DType dtype) {
  const std::unique_ptr<Backend> backend = make_backend(o.device, {size_t(64) << 30, o.threads});
  Backend& be = *backend;
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
    const auto t0 = std::chrono::steady_clock::now();
    model.zero_grad();
    model.forward(tokens);
    model.backward(targets, 1.0f, nullptr, 1.0);
    optim.step(model.master_flat().as<float>(), model.grad_flat().data, DType::f32, model.compute_flat().data, dtype,
               groups, 1e-4f, 1.0f, s + 1);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s >= o.warmup) best = std::min(best, dt);
  }
  return {double(BT) / best, best};
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

// Runs the PyTorch peer script; returns tokens/s or a negative number when unavailable.
double measure_torch(const ModelBenchOptions& o, const std::string& config_path, const std::string& dtype, int threads,
                     const std::string& core, std::string& note) {
  const std::string script = resolve_resource("bench/peer_torch_gpt2.py");
  const std::string cmd = (core.empty() ? "" : "OPENBLAS_CORETYPE=" + core + " ") +
                          "GLIBC_TUNABLES=glibc.malloc.hugetlb=1 OMP_NUM_THREADS=" + std::to_string(threads) + " " +
                          o.python + " " + script + " --config " + config_path + " --batch " +
                          std::to_string(o.micro_batch) + " --seq-len " + std::to_string(o.seq_len) + " --steps " +
                          std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) + " --dtype " + dtype +
                          " --threads " + std::to_string(threads) + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), pclose);
  if (!p) return note = "popen failed", -1;
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  const auto last = out.find_last_of('{');
  try {
    if (last == std::string::npos) throw std::runtime_error("no JSON");
    auto j = nlohmann::json::parse(out.substr(last));
    note = j.value("blas", std::string("?"));
    return j.at("tokens_per_s").get<double>();
  } catch (...) {
    note = "peer failed: " + out.substr(0, 300);
    return -1;
  }
}

bool torch_available(const std::string& python) {
  return std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) == 0;
}

}  // namespace

int run_model_bench(const ModelBenchOptions& o) {
  const std::string config_path = resolve_resource(o.model);
  const ModelSpec spec = ModelSpec::load(config_path);
  int threads = o.threads;
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#endif
  const double fpt = spec.training_flops_per_token(o.seq_len, false);
  const bool want_peer = o.peer == "torch" || (o.peer == "auto" && torch_available(o.python));
  STRATA_CHECK(o.peer != "torch" || torch_available(o.python), "--peer torch: '" + o.python + "' cannot import torch",
               "apt-get install python3-torch libopenblas0-openmp");
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
  const auto peer_list = split(o.peer_precisions);
  const std::string core = want_peer ? openblas_core() : "";
  if (!core.empty())  // (used when PyTorch's BLAS is OpenBLAS)
    std::printf("torch peer: OPENBLAS_CORETYPE=%s\n", core.c_str());
  struct Row {
    std::string name;
    Measured m;
    double peer;
    GemmBound bound;
  };
  std::vector<Row> rows;
  double torch_best = -1;
  std::string torch_best_name, note;
  for (const std::string& name : split(o.precisions)) {
    const Measured m = measure_strata(spec, o, parse_dtype(name));
    const GemmBound bound = measure_gemm_bound(spec, o.micro_batch, o.seq_len, parse_dtype(name));
    double peer = -1;
    if (want_peer && std::find(peer_list.begin(), peer_list.end(), name) != peer_list.end()) {
      peer = measure_torch(o, config_path, name, threads, core, note);
      if (peer <= 0) std::printf("  torch peer (%s): %s\n", name.c_str(), note.c_str());
      if (peer > torch_best) torch_best = peer, torch_best_name = name;
    }
    rows.push_back({name, m, peer, bound});
  }
  std::printf("%-6s %14s %12s %12s %10s %14s %12s %10s %14s\n", "dtype", "strata tok/s", "GFLOP/s", "bound GF/s",
              "bound ×", "torch tok/s", "GFLOP/s", "ratio", "vs torch best");
  for (const Row& r : rows) {
    const double ratio = r.peer > 0 ? r.m.tokens_per_s / r.peer : 0;
    const double vs_best = torch_best > 0 ? r.m.tokens_per_s / torch_best : 0;
    const double gflops = r.m.tokens_per_s * fpt * 1e-9, bound_ratio = gflops / r.bound.gflops;
    std::printf("%-6s %14.1f %12.1f %12.1f %10.3f %14.1f %12.1f %10.2f %14.2f\n", r.name.c_str(), r.m.tokens_per_s,
                gflops, r.bound.gflops, bound_ratio, r.peer, r.peer > 0 ? r.peer * fpt * 1e-9 : 0.0, ratio, vs_best);
    auto& j = result[r.name];
    j = {{"tokens_per_s", r.m.tokens_per_s}, {"gflops", gflops},           {"step_s", r.m.step_s},
         {"bound_gflops", r.bound.gflops},   {"bound_ratio", bound_ratio}, {"bound_impl", r.bound.impl}};
    if (r.peer > 0)
      j["torch_tokens_per_s"] = r.peer, j["torch_gflops"] = r.peer * fpt * 1e-9, j["ratio_vs_torch"] = ratio;
    if (torch_best > 0) j["ratio_vs_torch_fastest"] = vs_best, j["torch_fastest"] = torch_best_name;
  }
  if (torch_best > 0) {
    result["torch_blas"] = note;
    if (note == "openblas") result["torch_openblas_core"] = core.empty() ? "auto" : core;
  }
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace strata::bench
