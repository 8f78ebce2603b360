// `strata bench <what>`: benchmarks that print ratios against a peer or bound measured in
// the same run, ending with one JSON line.
#include <cstdio>
#include <cstring>
#include <cxxopts.hpp>

#include "backend/device.h"
#include "bench/bench_adam.h"
#include "bench/bench_comm.h"
#include "bench/bench_linear.h"
#include "bench/bench_model.h"
#include "bench/bench_nvme.h"
#include "bench/bench_offload.h"
#include "bench/bench_suite.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "host/adam/adam.h"

namespace strata::cli {

static int bench_linear_main(int argc, char** argv) {
  const bench::LinearBenchOptions d;
  cxxopts::Options o("strata bench linear",
                     "The linear layers' bf16 GEMMs on every path this CPU has, against the path Strata takes here.");
  auto s = [](auto v) { return cxxopts::value<std::string>()->default_value(std::to_string(v)); };
  o.add_options()("model", "model config", cxxopts::value<std::string>()->default_value(d.model))(
      "micro-batch", "sequences per step", s(d.micro_batch))("seq-len", "tokens per sequence", s(d.seq_len))(
      "reps", "timed calls per shape and path (the best is kept)", s(d.reps))("h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "bench linear", r)) return *done;
  bench::LinearBenchOptions b;
  try {
    auto gi = [&](const char* k) { return parse_int32(r[k].as<std::string>(), std::string("--") + k); };
    b.model = r["model"].as<std::string>();
    b.micro_batch = gi("micro-batch");
    b.seq_len = gi("seq-len");
    b.reps = gi("reps");
  } catch (const Error& e) {
    return usage_error("bench linear", e.what_failed());
  }
  if (b.micro_batch < 1 || b.seq_len < 1 || b.reps < 1) return usage_error("bench linear", "sizes must be positive");
  return bench::run_linear_bench(b);
}

static int bench_model_main(int argc, char** argv) {
  const bench::ModelBenchOptions d;
  cxxopts::Options o("strata bench model",
                     "Training-step throughput of a GPT-2 or Llama model against PyTorch on this CPU, and against the "
                     "bound of its own GEMMs.");
  auto s = [](auto v) { return cxxopts::value<std::string>()->default_value(std::to_string(v)); };
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("model", "model config", str(d.model))("micro-batch", "sequences per step", s(d.micro_batch))(
      "seq-len", "tokens per sequence", s(d.seq_len))("warmup", "untimed steps", s(d.warmup))(
      "steps", "timed steps (the best is reported)", s(d.steps))("threads", "threads (0 = all)", s(d.threads))(
      "precision", "comma-separated list of f32, bf16", str(d.precisions))("peer", "auto | torch | none", str(d.peer))(
      "peer-precision",
      "precisions PyTorch runs in; auto: f32, and bf16 where the CPU has AVX512-BF16 or AMX (on AVX2 its bf16 is "
      "~50x slower than its f32)",
      str(d.peer_precisions))("peer-mode", "eager, compile (torch.compile), or auto: both on PyTorch 2",
                              str(d.peer_modes))(
      "python", "python with torch for the peer (default: the venv of tools/setup-peers.sh, else /usr/bin/python3)",
      str(d.python))("device", "auto | cpu | cuda: the backend Strata's step runs on", str(d.device))(
      "profile", "print where Strata's best step spends its time, by op (CPU only)")("h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "bench model", r)) return *done;
  bench::ModelBenchOptions b;
  try {
    auto gi = [&](const char* k) { return parse_int32(r[k].as<std::string>(), std::string("--") + k); };
    b.model = r["model"].as<std::string>();
    b.micro_batch = gi("micro-batch");
    b.seq_len = gi("seq-len");
    b.warmup = gi("warmup");
    b.steps = gi("steps");
    b.threads = gi("threads");
    b.precisions = r["precision"].as<std::string>();
    b.peer = r["peer"].as<std::string>();
    b.peer_precisions = r["peer-precision"].as<std::string>();
    b.peer_modes = r["peer-mode"].as<std::string>();
    b.profile = r.count("profile") > 0;
    b.python = r["python"].as<std::string>();
    b.device = r["device"].as<std::string>();
    resolve_device(b.device);
  } catch (const Error& e) {
    return usage_error("bench model", e.what_failed());
  }
  if (b.peer != "auto" && b.peer != "torch" && b.peer != "none")
    return usage_error("bench model", "--peer: '" + b.peer + "' is not auto, torch or none");
  if (b.steps < 1 || b.micro_batch < 1 || b.seq_len < 1) return usage_error("bench model", "sizes must be positive");
  return bench::run_model_bench(b);
}

static int bench_adam_main(int argc, char** argv) {
  cxxopts::Options o("strata bench adam",
                     "Fused CPU Adam against this machine's memory bound and DeepSpeed's CPU Adam.");
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("sizes", "comma-separated parameter counts (K/M/G suffixes are binary)", str("64M,256M"))(
      "threads", "threads (0 = all)", str("0"))("repeats", "timed repetitions (the best is reported)", str("5"))(
      "isa", "auto | scalar | avx2 | avx512", str("auto"))("pin", "pin threads to physical cores")(
      "peer", "auto | none | path to the DeepSpeed harness (see bench/peers/)", str("auto"))(
      "state-dtype", "f32 | bf16: Adam's m and v", str("f32"))("master-dtype", "f32 | bf16: the master parameters",
                                                               str("f32"))(
      "grad-dtype", "f32 | bf16: the gradients the step reads", str("f32"))(
      "rounding", "stochastic | nearest: how 16-bit states round", str("stochastic"))("h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "bench adam", r)) return *done;
  bench::AdamBenchOptions b;
  try {
    b.sizes.clear();
    std::string s = r["sizes"].as<std::string>() + ",";
    for (size_t pos; (pos = s.find(',')) != std::string::npos; s.erase(0, pos + 1)) {
      std::string item = s.substr(0, pos);
      if (item.empty()) continue;
      long long mult = 1;
      const char u = item.back();
      if (u == 'K' || u == 'M' || u == 'G') {
        mult = u == 'K' ? 1ll << 10 : u == 'M' ? 1ll << 20 : 1ll << 30;
        item.pop_back();
      }
      const long long n = parse_int(item, "--sizes") * mult;
      if (n <= 0) return usage_error("bench adam", "--sizes: sizes must be positive");
      b.sizes.push_back(n);
    }
    b.threads = parse_int32(r["threads"].as<std::string>(), "--threads");
    b.repeats = parse_int32(r["repeats"].as<std::string>(), "--repeats");
    b.isa = r["isa"].as<std::string>();
    host::parse_adam_isa(b.isa);
    b.pin = r.count("pin") > 0;
    b.peer = r["peer"].as<std::string>();
    b.state_dtype = r["state-dtype"].as<std::string>();
    b.master_dtype = r["master-dtype"].as<std::string>();
    b.grad_dtype = r["grad-dtype"].as<std::string>();
    const std::string rounding = r["rounding"].as<std::string>();
    for (const auto& [flag, value] : {std::pair{"--state-dtype", b.state_dtype},
                                      {"--master-dtype", b.master_dtype},
                                      {"--grad-dtype", b.grad_dtype}})
      if (value != "f32" && value != "bf16")
        return usage_error("bench adam", std::string(flag) + " " + value + ": choose f32 or bf16");
    if (rounding != "stochastic" && rounding != "nearest")
      return usage_error("bench adam", "--rounding " + rounding + ": choose stochastic or nearest");
    b.stochastic = rounding == "stochastic";
  } catch (const Error& e) {
    return usage_error("bench adam", e.what_failed());
  }
  if (b.sizes.empty() || b.repeats < 1) return usage_error("bench adam", "need at least one size and one repeat");
  return bench::run_adam_bench(b);
}

static int bench_comm_main(int argc, char** argv) {
  cxxopts::Options o("strata bench comm", "Bus bandwidth of each collective (run under mpirun -np N).");
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("min-bytes", "smallest message", str("1024"))("max-bytes", "largest message (sizes step by 4x)",
                                                                str("64MiB"))(
      "iters", "timed calls per size (the best is reported)", str("10"))("warmup", "untimed calls per size", str("2"))(
      "h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "bench comm", r)) return *done;
  bench::CommBenchOptions b;
  try {
    b.min_bytes = (long long)parse_bytes(r["min-bytes"].as<std::string>(), "--min-bytes");
    b.max_bytes = (long long)parse_bytes(r["max-bytes"].as<std::string>(), "--max-bytes");
    b.iters = parse_int32(r["iters"].as<std::string>(), "--iters");
    b.warmup = parse_int32(r["warmup"].as<std::string>(), "--warmup");
  } catch (const Error& e) {
    return usage_error("bench comm", e.what_failed());
  }
  if (b.min_bytes < 4 || b.max_bytes < b.min_bytes || b.iters < 1)
    return usage_error("bench comm", "need 4 <= --min-bytes <= --max-bytes and --iters >= 1");
  return bench::run_comm_bench(b);
}

static int bench_offload_main(int argc, char** argv) {
  const bench::OffloadBenchOptions d;
  cxxopts::Options o(
      "strata bench offload",
      "An offloaded step against the same step on the device, with the engines' busy times and overlap.");
  auto s = [](auto v) { return cxxopts::value<std::string>()->default_value(std::to_string(v)); };
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("model", "model config", str(d.model))("micro-batch", "sequences per step", s(d.micro_batch))(
      "seq-len", "tokens per sequence", s(d.seq_len))("zero-stage", "1, 2 or 3", s(d.stage))(
      "precision", "f32 | bf16 | f16", str(d.precision))("warmup", "untimed steps", s(d.warmup))(
      "steps", "timed steps (their mean is reported)", s(d.steps))("device-threads", "the device's threads",
                                                                   s(d.device_threads))(
      "host-threads", "the host's threads", s(d.host_threads))("reduce-bucket-size", "elements per gradient bucket",
                                                               s(d.reduce_bucket_size))(
      "offload-param", "none | cpu | nvme: stage-3 parameters too, on the --tier", str(d.offload_param))(
      "offload-ratio", "fraction of the optimizer on the host", str("0.85"))(
      "speculative-step", "auto | true | false (as strata train)", str(d.speculative))(
      "device", "auto | cpu | cuda: the backend", str(d.device))(
      "tier", "cpu | nvme: the offloaded states in host RAM, or on NVMe against fio's bandwidth", str(d.tier))(
      "nvme-path", "--tier nvme: directory on the drive", str(""))(
      "grad-clip", "gradient-norm clip (default: 0 in RAM, so no update is redone; 1 on NVMe, train's)", str(""))(
      "host-mem", "the host tier's budget (default: train's)", str(""))("fio", "auto | none | path to fio", str(d.fio))(
      "fio-bytes", "bytes fio reads and writes on the swap file's path", str("1GiB"))(
      "baselines", "true | false: also the step on the device alone (and, with nvme, in RAM)", str("true"))(
      "h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "bench offload", r)) return *done;
  bench::OffloadBenchOptions b;
  try {
    auto gi = [&](const char* k) { return parse_int(r[k].as<std::string>(), std::string("--") + k); };
    b.model = r["model"].as<std::string>();
    b.micro_batch = int(gi("micro-batch"));
    b.seq_len = int(gi("seq-len"));
    b.stage = int(gi("zero-stage"));
    b.precision = r["precision"].as<std::string>();
    parse_dtype(b.precision);
    b.warmup = int(gi("warmup"));
    b.steps = int(gi("steps"));
    b.device_threads = int(gi("device-threads"));
    b.host_threads = int(gi("host-threads"));
    b.reduce_bucket_size = parse_count(r["reduce-bucket-size"].as<std::string>(), "--reduce-bucket-size");
    b.offload_param = r["offload-param"].as<std::string>();
    b.offload_ratio = parse_double(r["offload-ratio"].as<std::string>(), "--offload-ratio");
    b.speculative = r["speculative-step"].as<std::string>();
    if (b.speculative != "auto" && b.speculative != "true" && b.speculative != "false")
      return usage_error("bench offload", "--speculative-step must be auto, true or false");
    b.device = r["device"].as<std::string>();
    b.tier = r["tier"].as<std::string>();
    if (b.tier != "cpu" && b.tier != "nvme") return usage_error("bench offload", "--tier must be cpu or nvme");
    b.nvme_path = r["nvme-path"].as<std::string>();
    if (b.tier == "nvme" && b.nvme_path.empty())
      return usage_error("bench offload", "--tier nvme needs --nvme-path DIR (a directory on the drive)");
    if (const std::string c = r["grad-clip"].as<std::string>(); !c.empty()) {
      b.grad_clip = parse_double(c, "--grad-clip");
      if (!(b.grad_clip >= 0)) return usage_error("bench offload", "--grad-clip must be 0 or more");
    }
    if (const std::string h = r["host-mem"].as<std::string>(); !h.empty())
      b.host_mem = (long long)parse_bytes(h, "--host-mem");
    b.fio = r["fio"].as<std::string>();
    b.baselines = r["baselines"].as<std::string>() != "false";
    b.fio_bytes = (long long)parse_bytes(r["fio-bytes"].as<std::string>(), "--fio-bytes");
    if (b.offload_param != "none" && b.offload_param != "cpu" && b.offload_param != "nvme")
      return usage_error("bench offload", "--offload-param must be none, cpu or nvme");
    resolve_device(b.device);
  } catch (const Error& e) {
    return usage_error("bench offload", e.what_failed());
  }
  if (b.stage < 1 || b.stage > 3) return usage_error("bench offload", "--zero-stage must be 1, 2 or 3");
  if (b.steps < 1 || b.device_threads < 1 || b.host_threads < 1)
    return usage_error("bench offload", "--steps, --device-threads and --host-threads must be positive");
  return bench::run_offload_bench(b);
}

static int bench_nvme_main(int argc, char** argv) {
  cxxopts::Options o("strata bench nvme", "NVMe store bandwidth against fio on the same file (io_uring, O_DIRECT).");
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("nvme-path", "directory for the test file", str("."))(
      "bytes", "bytes per measurement", str("512MiB"))("request-sizes", "comma-separated request sizes",
                                                       str("1MiB,2MiB,4MiB,8MiB"))(
      "queue-depths", "comma-separated queue depths", str("4,16,64"))("fio", "auto | none | path to fio", str("auto"))(
      "repeats", "best of this many", str("1"))("h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "bench nvme", r)) return *done;
  bench::NvmeBenchOptions b;
  auto split = [](std::string s) {
    std::vector<std::string> out;
    s += ",";
    for (size_t pos; (pos = s.find(',')) != std::string::npos; s.erase(0, pos + 1))
      if (pos) out.push_back(s.substr(0, pos));
    return out;
  };
  try {
    b.dir = r["nvme-path"].as<std::string>();
    b.bytes = (long long)parse_bytes(r["bytes"].as<std::string>(), "--bytes");
    b.request_sizes.clear(), b.queue_depths.clear();
    for (const auto& v : split(r["request-sizes"].as<std::string>()))
      b.request_sizes.push_back((long long)parse_bytes(v, "--request-sizes"));
    for (const auto& v : split(r["queue-depths"].as<std::string>()))
      b.queue_depths.push_back(parse_int32(v, "--queue-depths"));
    b.fio = r["fio"].as<std::string>();
    b.repeats = parse_int32(r["repeats"].as<std::string>(), "--repeats");
  } catch (const Error& e) {
    return usage_error("bench nvme", e.what_failed());
  }
  if (b.request_sizes.empty() || b.queue_depths.empty() || b.repeats < 1)
    return usage_error("bench nvme", "need request sizes, queue depths and --repeats >= 1");
  for (long long s : b.request_sizes)
    if (s <= 0 || s % 4096) return usage_error("bench nvme", "--request-sizes must be multiples of 4KiB");
  return bench::run_nvme_bench(b);
}

static int bench_suite_main(int argc, char** argv) {
  const bench::SuiteOptions d;
  cxxopts::Options o("strata bench suite",
                     "The ZeRO paper's GPT configurations and their scaled-down CPU versions under chosen stages, "
                     "offloads and rank counts, and the largest trainable model per stage and rank count; results "
                     "in OUT/<timestamp>/ as JSON, Markdown and PNG.");
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("quick", "the suite's quick section (within 10 minutes on 2 cores)")(
      "suite", "the suite file (sweeps and the scaling search)", str(d.suite))("out", "results directory", str(d.out))(
      "mpirun", "the MPI launcher for multi-rank runs", str(d.mpirun))(
      "nvme-path", "directory for NVMe offload runs (default: inside the results)", str(""))(
      "host-mem", "host RAM per rank for the plan and the runs (default: MemAvailable / ranks)", str(""))(
      "peak-tflops", "the device's peak TFLOP/s for MFU (0 = unknown)", str("0"))(
      "run-timeout", "seconds one run may take", str("900"))(
      "device", "auto | cpu | cuda: the backend every run's step runs on", str(d.device))("h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "bench suite", r)) return *done;
  bench::SuiteOptions b;
  try {
    b.quick = r.count("quick") > 0;
    b.suite = r["suite"].as<std::string>();
    b.out = r["out"].as<std::string>();
    b.mpirun = r["mpirun"].as<std::string>();
    b.nvme_path = r["nvme-path"].as<std::string>();
    b.host_mem = r["host-mem"].as<std::string>();
    if (!b.host_mem.empty()) parse_bytes(b.host_mem, "--host-mem");
    b.peak_tflops = parse_double(r["peak-tflops"].as<std::string>(), "--peak-tflops");
    b.run_timeout = parse_double(r["run-timeout"].as<std::string>(), "--run-timeout");
    b.device = r["device"].as<std::string>();
    resolve_device(b.device);  // cuda where none can run: the error says what is missing
  } catch (const Error& e) {
    return usage_error("bench suite", e.what_failed());
  }
  if (!(b.peak_tflops >= 0) || !(b.run_timeout > 0))
    return usage_error("bench suite", "--peak-tflops must not be negative and --run-timeout must be positive");
  return bench::run_suite(b);
}

int bench_main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::puts(
        "usage: strata bench <what> [options]\n\n  model   training-step throughput against PyTorch\n"
        "  linear  the linear layers' bf16 GEMMs on every CPU path, against the default path\n"
        "  adam    fused CPU Adam against the memory bound and DeepSpeed\n"
        "  comm    bus bandwidth of each collective (under mpirun)\n"
        "  offload an offloaded step against the same step on the device: busy times and overlap\n"
        "  nvme    NVMe store bandwidth against fio on the same file\n"
        "  suite   the ZeRO paper's GPT configurations (scaled for the CPU): throughput, memory, scaling\n");
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "model")) return bench_model_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "linear")) return bench_linear_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "adam")) return bench_adam_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "comm")) return bench_comm_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "offload")) return bench_offload_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "nvme")) return bench_nvme_main(argc - 1, argv + 1);
  if (!std::strcmp(argv[1], "suite")) return bench_suite_main(argc - 1, argv + 1);
  return usage_error("bench", std::string("unknown benchmark '") + argv[1] + "'");
}

}  // namespace strata::cli
