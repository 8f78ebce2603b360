// `strata train`: one option table (cxxopts) generates the help and parses every value;
// values are then checked strictly, and any error names the option.
#include <cstdio>
#include <cxxopts.hpp>
#include <memory>

#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/parse.h"
#include "train/trainer.h"

namespace strata::cli {

int train_main(int argc, char** argv) {
  const TrainOptions d;
  cxxopts::Options o("strata train", "Train a GPT-2 model. With no options: the embedded default model and data.");
  // Values are taken as strings and parsed strictly below, so "--steps 1x" is an error.
  auto s = [](auto v) { return cxxopts::value<std::string>()->default_value(std::to_string(v)); };
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  auto fmt = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return cxxopts::value<std::string>()->default_value(b);
  };
  o.add_options()("model", "model config (JSON)", str(d.model))(
      "data", "training data: token file (.bin/.u16 uint16, .u32 uint32, llm.c .bin) or text (.txt, byte-level)",
      str(d.data))("data-format", "auto | u16 | u32 | text", str(d.data_format))(
      "steps", "optimizer steps", s(d.steps))("micro-batch", "sequences per micro-batch", s(d.micro_batch))(
      "grad-accum", "micro-batches accumulated per step", s(d.grad_accum))(
      "seq-len", "tokens per sequence", s(d.seq_len))("lr", "peak learning rate", fmt(d.lr))(
      "warmup", "linear warmup steps", s(d.warmup))("min-lr-ratio", "cosine decay floor as a fraction of --lr",
                                                    fmt(d.min_lr_ratio))(
      "weight-decay", "AdamW decoupled weight decay (matmul weights and embeddings)", fmt(d.weight_decay))(
      "beta1", "Adam beta1", fmt(d.beta1))("beta2", "Adam beta2", fmt(d.beta2))("eps", "Adam epsilon", fmt(d.eps))(
      "grad-clip", "global gradient-norm clip (0 = off)", fmt(d.grad_clip))(
      "precision", "f32 | bf16 (bf16 compute, f32 master weights)", str("f32"))(
      "seed", "random seed (weights and data order)", s(d.seed))("out", "output directory (metrics.jsonl)", str(d.out))(
      "log-every", "steps between logged metrics", s(d.log_every))(
      "threads", "CPU threads for ops (0 = all)", s(d.threads))("pin-threads",
                                                                "pin the OpenMP threads one per physical core")(
      "adam-isa", "CPU Adam kernel: auto | scalar | avx2 | avx512", str(d.adam_isa))(
      "device-mem", "device memory budget, e.g. 8GiB", str("8GiB"))(
      "zero-stage",
      "ZeRO stage: 0 replicated, 1 +optimizer states, 2 +gradients, 3 +parameters partitioned (under mpirun)",
      s(d.zero_stage))("sub-group-size", "parameters per partitioned sub-group", s(d.sub_group_size))(
      "comm-timeout", "seconds a collective may take before the run fails with a message", fmt(d.comm_timeout))(
      "h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "train", r)) return *done;
  TrainOptions t;
  try {
    auto gi = [&](const char* k) { return parse_int(r[k].as<std::string>(), std::string("--") + k); };
    auto gd = [&](const char* k) { return parse_double(r[k].as<std::string>(), std::string("--") + k); };
    t.model = r["model"].as<std::string>();
    t.data = r["data"].as<std::string>();
    t.data_format = r["data-format"].as<std::string>();
    t.steps = gi("steps");
    t.micro_batch = int(gi("micro-batch"));
    t.grad_accum = int(gi("grad-accum"));
    t.seq_len = int(gi("seq-len"));
    t.lr = gd("lr");
    t.warmup = gi("warmup");
    t.min_lr_ratio = gd("min-lr-ratio");
    t.weight_decay = gd("weight-decay");
    t.beta1 = gd("beta1");
    t.beta2 = gd("beta2");
    t.eps = gd("eps");
    t.grad_clip = gd("grad-clip");
    const std::string prec = r["precision"].as<std::string>();
    if (prec != "f32" && prec != "bf16") return usage_error("train", "--precision: '" + prec + "' is not f32 or bf16");
    t.precision = parse_dtype(prec);
    t.seed = uint64_t(gi("seed"));
    t.out = r["out"].as<std::string>();
    t.log_every = gi("log-every");
    t.threads = int(gi("threads"));
    t.adam_isa = r["adam-isa"].as<std::string>();
    t.pin_threads = r.count("pin-threads") > 0;
    if (t.adam_isa != "auto" && t.adam_isa != "scalar" && t.adam_isa != "avx2" && t.adam_isa != "avx512")
      return usage_error("train", "--adam-isa: '" + t.adam_isa + "' is not auto, scalar, avx2 or avx512");
    t.device_mem = parse_bytes(r["device-mem"].as<std::string>(), "--device-mem");
    t.zero_stage = int(gi("zero-stage"));
    t.sub_group_size = gi("sub-group-size");
    t.comm_timeout = gd("comm-timeout");
  } catch (const Error& e) {
    return usage_error("train", e.what_failed() + " (" + e.hint() + ")");
  }
  if (t.zero_stage < 0 || t.zero_stage > 3)
    return usage_error("train", "--zero-stage: " + std::to_string(t.zero_stage) + " is not 0, 1, 2 or 3");
  if (t.sub_group_size < 1) return usage_error("train", "--sub-group-size must be positive");
  if (!(t.comm_timeout > 0)) return usage_error("train", "--comm-timeout must be positive");
  // Under mpirun/srun every rank trains its slice of the global batch.
  std::unique_ptr<MpiComm> comm;
  if (MpiComm::launched_by_mpi()) {
    comm = std::make_unique<MpiComm>(MpiCommOptions{t.comm_timeout, true});
    t.comm = comm.get();
  }
  train(t);
  return 0;
}

}  // namespace strata::cli
