#include "bench/bench_adam.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "bench/subprocess.h"
#include "bench/torch_peer.h"
#include "core/error.h"
#include "core/rng.h"
#include "host/adam/adam.h"
#include "host/adam/adam_kernels.h"
#include "host/host_memory.h"

namespace strata::bench {

namespace {

using clock_type = std::chrono::steady_clock;

struct HostArray {
  float* p;
  size_t bytes;
  HostArray(size_t n, const char* tag) : p(static_cast<float*>(host::host_alloc(n * 4, tag))), bytes(n * 4) {}
  ~HostArray() { host::host_free(p, bytes); }
};

std::string default_peer() {
  if (const char* e = std::getenv("STRATA_DS_ADAM"); e && *e) return e;
  const std::string fixed = peers_dir() + "/ds_cpu_adam_bench";
  return std::filesystem::exists(fixed) ? fixed : "";
}

// The process's CPU set before --pin narrowed this thread to one CPU; the peer is started
// with it, since a child inherits the starting thread's affinity.
cpu_set_t g_unpinned;

// Runs the DeepSpeed harness; returns params/s or a negative value with `note` set. `version`
// gets the DeepSpeed release and commit the harness was built from.
double run_peer(const std::string& exe, long long n, int threads, int repeats, const std::string& mode,
                std::string& note, std::string& version) {
  const std::string cmd = "OMP_NUM_THREADS=" + std::to_string(threads) + " " + exe + " " + std::to_string(n) + " " +
                          std::to_string(threads) + " " + std::to_string(repeats) + " " + mode + " 2>&1";
  cpu_set_t mine;
  sched_getaffinity(0, sizeof mine, &mine);
  sched_setaffinity(0, sizeof g_unpinned, &g_unpinned);
  const std::string out = run_captured(cmd);
  sched_setaffinity(0, sizeof mine, &mine);
  try {
    auto j = nlohmann::json::parse(out.substr(out.find_last_of('{')));
    if (j.contains("deepspeed"))
      version = j["deepspeed"].get<std::string>() + " (" + j.value("commit", std::string("?")) + ")";
    if (j.contains("error")) return note = j["error"].get<std::string>(), -1;
    return j.at("params_per_s").get<double>();
  } catch (...) {
    note = "peer failed: " + out.substr(0, 300);
    return -1;
  }
}

}  // namespace

int run_adam_bench(const AdamBenchOptions& o) {
  host::AdamOptions ao{host::parse_adam_isa(o.isa), o.threads, 1 << 16};
  if (ao.isa == host::AdamIsa::automatic) ao.isa = host::adam_default_isa();
  STRATA_CHECK(host::adam_isa_supported(ao.isa), "--isa " + o.isa + " is not supported by this CPU", "use --isa auto");
  int threads = o.threads;
#ifdef _OPENMP
  if (threads <= 0) threads = omp_get_max_threads();
#endif
  ao.threads = threads;
  std::string pinned = "no";
  sched_getaffinity(0, sizeof g_unpinned, &g_unpinned);
  if (o.pin) pinned = host::pin_threads_to_physical_cores(threads);
  const std::string peer = o.peer == "auto" ? default_peer() : o.peer == "none" ? "" : o.peer;
  const bool wide = ao.isa == host::AdamIsa::avx512;
  const bool s16 = o.state_dtype == "bf16", p16 = o.master_dtype == "bf16", g16 = o.grad_dtype == "bf16";
  const DType gdt = g16 ? DType::bf16 : DType::f32;
  // Bytes a parameter moves: the master and m, v read and written, the gradient read.
  const double bpp = 2.0 * (p16 ? 2 : 4) + (g16 ? 2 : 4) + 4.0 * (s16 ? 2 : 4);
  std::printf(
      "bench adam: isa %s, %d threads (pinned: %s), tile %lld, best of %d; master %s, m and v %s, gradients %s%s, "
      "%.0f B/param\n",
      std::string(host::adam_isa_name(ao.isa)).c_str(), threads, pinned.c_str(), (long long)ao.tile, o.repeats,
      p16 ? "bf16" : "f32", s16 ? "bf16" : "f32", g16 ? "bf16" : "f32",
      s16 || p16 ? (o.stochastic ? " (stochastic rounding)" : " (round to nearest)") : "", bpp);
  if (s16 && !peer.empty())
    std::printf(
        "  the DeepSpeed column is its 16-bit-state step: bf16 parameters, gradients, m and v (14 B/param), round to "
        "nearest\n");
  std::printf("%12s %12s %12s %12s %10s %14s %14s %10s %10s\n", "params", "bound GB/s", "adam GB/s", "adam Gp/s",
              "bound_ratio", "+bf16 Gp/s", "deepspeed Gp/s", "vs ds", "vs ds+cp");
  nlohmann::json sizes = nlohmann::json::array();
  nlohmann::json last;
  std::string ds_version, ds_missing;
  // One allocation for the largest size, first-touched once with the kernel's partition;
  // smaller sizes use its prefix. (Allocating per size lets a later, larger request land
  // on fragmented memory without huge pages, which lowers the bound it measures.)
  const long long max_n = *std::max_element(o.sizes.begin(), o.sizes.end());
  HostArray p(size_t(max_n), "bench:param"), g(size_t(max_n), "bench:grad"), m(size_t(max_n), "bench:m"),
      v(size_t(max_n), "bench:v");
  HostArray out_buf(size_t(max_n) / 2 + 1, "bench:bf16_out");
  void* out = out_buf.p;
  for (float* a : {p.p, g.p, m.p, v.p}) host::first_touch_zero(a, max_n, ao);
  host::first_touch_zero(out_buf.p, max_n / 2 + 1, ao);
  const int64_t tile = ao.tile;
  {
    const int64_t tiles = (max_n + tile - 1) / tile;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t k = 0; k < tiles; ++k) {
      Rng r(1, uint64_t(k));
      for (int64_t i = k * tile; i < std::min<int64_t>(max_n, (k + 1) * tile); ++i) {
        p.p[i] = float(r.uniform() - 0.5);
        const float gv = float(r.uniform() - 0.5) * 1e-2f;
        if (g16)
          reinterpret_cast<uint16_t*>(g.p)[i] = f32_to_bf16(gv);
        else
          g.p[i] = gv;
      }
    }
  }
  for (long long n : o.sizes) {
    const int64_t tiles = (n + tile - 1) / tile;
    // The bound (same access pattern, trivial arithmetic, same threads and tiles), the
    // kernel, and the kernel with the bf16 copy-out, interleaved in every repetition so a
    // drift in the machine's bandwidth hits all three alike; the best of each is kept.
    host::AdamTensors t;
    t.grad = g.p, t.grad_dtype = gdt, t.n = n, t.stochastic = o.stochastic, t.seed = 1;
    if (p16)
      t.param16 = reinterpret_cast<uint16_t*>(p.p);
    else
      t.param = p.p;
    if (s16)
      t.m16 = reinterpret_cast<uint16_t*>(m.p), t.v16 = reinterpret_cast<uint16_t*>(v.p);
    else
      t.m = m.p, t.v = v.p;
    host::AdamTensors tc = t;
    tc.param_out = out, tc.out_dtype = DType::bf16;
    host::AdamHyper h{1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, true, true, 1, 1.0f};
    double t_bound = 1e30, t_adam = 1e30, t_copy = 1e30;
    auto timed = [](double& best, auto&& f) {
      const auto t0 = clock_type::now();
      f();
      best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
    };
    for (int r = 0; r < o.repeats; ++r) {
      h.step = r + 1;
      timed(t_bound, [&] {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (int64_t k = 0; k < tiles; ++k) {
          const int64_t b = k * tile, e = std::min<int64_t>(n, b + tile);
          if (s16 || p16 || g16) {
            if (wide)
              host::adam_impl::stream_bound16_avx512(p.p, p16, m.p, v.p, s16, g.p, gdt, b, e);
            else
              host::adam_impl::stream_bound16_avx2(p.p, p16, m.p, v.p, s16, g.p, gdt, b, e);
          } else if (wide) {
            host::adam_impl::stream_bound_avx512(p.p, m.p, v.p, g.p, b, e);
          } else {
            host::adam_impl::stream_bound_avx2(p.p, m.p, v.p, g.p, b, e);
          }
        }
      });
      timed(t_adam, [&] { host::adam_step(t, h, ao); });
      timed(t_copy, [&] { host::adam_step(tc, h, ao); });
    }
    const double nn = double(n);
    const double bound_gbs = bpp * nn / t_bound * 1e-9, adam_gbs = bpp * nn / t_adam * 1e-9;
    nlohmann::json row = {{"params", n},
                          {"bound_gbytes_per_s", bound_gbs},
                          {"params_per_s", nn / t_adam},
                          {"gbytes_per_s", adam_gbs},
                          {"bound_ratio", adam_gbs / bound_gbs},
                          {"bf16_copy_params_per_s", nn / t_copy},
                          {"bf16_copy_gbytes_per_s", (bpp + 2.0) * nn / t_copy * 1e-9}};
    double ds = -1, ds_copy = -1;
    std::string note;
    if (!peer.empty() && s16) {
      // DeepSpeed's own 16-bit-state step; it has no fused bf16 copy-out to compare with.
      ds = run_peer(peer, n, threads, o.repeats, "bf16", note, ds_version);
      if (ds > 0)
        row["deepspeed_bf16_state_params_per_s"] = ds, row["ratio_vs_deepspeed_bf16_state"] = nn / t_adam / ds;
      else
        ds_missing = note;
    } else if (!peer.empty()) {
      ds = run_peer(peer, n, threads, o.repeats, "plain", note, ds_version);
      ds_copy = run_peer(peer, n, threads, o.repeats, "copy", note, ds_version);
      if (ds > 0) row["deepspeed_params_per_s"] = ds, row["ratio_vs_deepspeed"] = nn / t_adam / ds;
      if (ds_copy > 0)
        row["deepspeed_plus_copy_params_per_s"] = ds_copy,
        row["bf16_copy_ratio_vs_deepspeed_plus_copy"] = nn / t_copy / ds_copy;
    }
    std::printf("%12lld %12.1f %12.1f %12.3f %10.3f %14.3f %14.3f %10.3f %10.3f\n", n, bound_gbs, adam_gbs,
                nn / t_adam * 1e-9, adam_gbs / bound_gbs, nn / t_copy * 1e-9, ds > 0 ? ds * 1e-9 : 0.0,
                ds > 0 ? nn / t_adam / ds : 0.0, ds_copy > 0 ? nn / t_copy / ds_copy : 0.0);
    if (!note.empty()) std::printf("  deepspeed peer: %s\n", note.c_str());
    sizes.push_back(row);
    last = row;
  }
  if (peer.empty())
    std::printf(
        "  (no DeepSpeed peer: run tools/setup-peers.sh, or build one with bench/peers/build_ds_cpu_adam.sh and pass "
        "--peer PATH)\n");
  nlohmann::json result = {{"bench", "adam"},
                           {"isa", host::adam_isa_name(ao.isa)},
                           {"threads", threads},
                           {"pinned", pinned},
                           {"state_dtype", s16 ? "bf16" : "f32"},
                           {"master_dtype", p16 ? "bf16" : "f32"},
                           {"grad_dtype", g16 ? "bf16" : "f32"},
                           {"rounding", o.stochastic ? "stochastic" : "nearest"},
                           {"bytes_per_param", bpp},
                           {"params_per_s", last.value("params_per_s", 0.0)},
                           {"gbytes_per_s", last.value("gbytes_per_s", 0.0)},
                           {"bound_gbytes_per_s", last.value("bound_gbytes_per_s", 0.0)},
                           {"bound_ratio", last.value("bound_ratio", 0.0)},
                           {"sizes", sizes}};
  if (!ds_version.empty()) result["deepspeed"] = ds_version;
  if (s16 && !peer.empty())
    result["deepspeed_bf16_state"] =
        ds_missing.empty() ? "Step_8<c10::BFloat16, c10::BFloat16> (bf16 parameters, gradients, m, v)" : ds_missing;
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace strata::bench
