// strata: the command-line entry point. `strata train`, `strata bench ...`.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

namespace strata::cli {

int usage_error(const char* cmd, const std::string& message) {
  std::fprintf(stderr, "strata %s: %s (see 'strata %s --help')\n", cmd, message.c_str(), cmd);
  return 2;
}

std::optional<int> parse_options(cxxopts::Options& o, int argc, char** argv, const char* cmd, cxxopts::ParseResult& r) {
  try {
    r = o.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    return usage_error(cmd, e.what());
  }
  if (r.count("help")) {
    std::fputs(o.help().c_str(), stdout);
    return 0;
  }
  if (!r.unmatched().empty()) return usage_error(cmd, "unexpected argument '" + r.unmatched().front() + "'");
  return std::nullopt;
}

}  // namespace strata::cli

static const char* kUsage =
    "strata — a ZeRO training engine (CPU backend; CUDA when built with it)\n"
    "\n"
    "usage: strata <command> [options]\n"
    "\n"
    "commands:\n"
    "  train        train a GPT-2 or Llama model (bare 'strata train' trains the embedded default)\n"
    "  export       consolidate a checkpoint into Hugging Face safetensors\n"
    "  plan         will it fit: per-rank bytes per tier for every stage and offload, and a recommendation\n"
    "  plot         a PNG of a training run: loss (train and validation), lr, grad norm, tokens/s, tier bytes\n"
    "  bench model  tokens/s and GFLOP/s of a training step (GPT-2-small shape), f32 and bf16\n"
    "  bench adam   the fused CPU Adam against the memory bound and DeepSpeed\n"
    "  bench comm   bus bandwidth of each collective (run under mpirun -np N)\n"
    "  bench suite  the ZeRO paper's GPT configurations: throughput, memory, largest trainable model\n"
    "\n"
    "'strata <command> --help' lists a command's options.\n";

int main(int argc, char** argv) {
  // The CPU kernels are compiled for x86-64-v3; say so instead of dying on SIGILL.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "strata: this CPU lacks AVX2/FMA, which the CPU backend requires (x86-64-v3)\n");
    return 1;
  }
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::puts("strata 0.1.0");
    return 0;
  }
  try {
    if (!std::strcmp(argv[1], "train")) return strata::cli::train_main(argc - 1, argv + 1);
    if (!std::strcmp(argv[1], "bench")) return strata::cli::bench_main(argc - 1, argv + 1);
    if (!std::strcmp(argv[1], "export")) return strata::cli::export_main(argc - 1, argv + 1);
    if (!std::strcmp(argv[1], "plan")) return strata::cli::plan_main(argc - 1, argv + 1);
    if (!std::strcmp(argv[1], "plot")) return strata::cli::plot_main(argc - 1, argv + 1);
  } catch (const strata::Error& e) {
    std::fprintf(stderr, "strata %s: error: %s\n", argv[1], e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata %s: error: %s\n", argv[1], e.what());
    return 1;
  }
  std::fprintf(stderr, "strata: unknown command '%s' (see 'strata --help')\n", argv[1]);
  return 2;
}
