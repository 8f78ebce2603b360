#include "train/resume.h"

#include <cstdio>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "train/option_registry.h"

namespace strata {

namespace {

struct Difference {
  std::string option, now, saved;
  bool changes_result;  // what the run computes, not only how fast or how long
};

// The options the manifest recorded that differ from this run's. Keys an older manifest lacks
// are not compared.
std::vector<Difference> differences(const CheckpointManifest& m, const TrainOptions& o, const std::string& data_path,
                                    int world) {
  std::vector<Difference> out;
  const nlohmann::json& r = m.run;
  auto str = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  auto cmp = [&](const char* key, const char* option, const nlohmann::json& now, bool changes_result) {
    if (r.contains(key) && r[key] != now) out.push_back({option, str(now), str(r[key]), changes_result});
  };
  cmp("precision", "--precision", std::string(dtype_name(o.precision)), true);
  cmp("seq_len", "--seq-len", o.seq_len, true);
  if (r.contains("micro_batch") && r.contains("grad_accum") && r["micro_batch"].is_number_integer() &&
      r["grad_accum"].is_number_integer()) {
    const int64_t saved = r["micro_batch"].get<int64_t>() * r["grad_accum"].get<int64_t>() * m.world;
    const int64_t now = int64_t(o.micro_batch) * o.grad_accum * world;
    if (saved != now)
      out.push_back({"global batch (--micro-batch x --grad-accum x ranks)",
                     std::to_string(o.micro_batch) + " x " + std::to_string(o.grad_accum) + " x " +
                         std::to_string(world) + " = " + std::to_string(now),
                     r["micro_batch"].dump() + " x " + r["grad_accum"].dump() + " x " + std::to_string(m.world) +
                         " = " + std::to_string(saved),
                     true});
  }
  cmp("master_dtype", "--master-dtype", option_value(o, "master-dtype"), true);
  cmp("optimizer_state_dtype", "--optimizer-state-dtype", option_value(o, "optimizer-state-dtype"), true);
  // The rounding matters only where a state is 16-bit, in the checkpoint's run or this one.
  const auto saved_bf16 = [&](const char* key) { return r.contains(key) && r[key] == "bf16"; };
  if (o.optimizer_state_dtype == DType::bf16 || o.master_dtype == DType::bf16 || saved_bf16("optimizer_state_dtype") ||
      saved_bf16("master_dtype"))
    cmp("state_rounding", "--state-rounding", option_value(o, "state-rounding"), true);
  cmp("lr", "--lr", o.lr, false);
  cmp("warmup", "--warmup", o.warmup, false);
  cmp("warmup_type", "--warmup-type", option_value(o, "warmup-type"), false);
  cmp("adam_bias_correction", "--adam-bias-correction", o.adam_bias_correction, false);
  cmp("steps", "--steps", o.steps, false);
  cmp("data", "--data", data_path, false);
  return out;
}

}  // namespace

ResumePoint find_resume_point(const TrainOptions& opts, Communicator* comm, const nlohmann::json& model_shape,
                              const std::string& data_path, bool talk) {
  ResumePoint p;
  if (!opts.resume) return p;
  const std::string dir = newest_checkpoint(opts.out);
  if (dir.empty()) {
    if (talk)
      std::fprintf(stderr, "strata: --resume: no complete checkpoint in %s/checkpoints: starting fresh\n",
                   opts.out.c_str());
    return p;
  }
  p.checkpoint = std::make_unique<CheckpointReader>(dir, comm);
  const CheckpointManifest& m = p.checkpoint->manifest();
  STRATA_CHECK(
      m.model == model_shape,
      "checkpoint '" + dir + "' was written for model " + m.model.dump() + ", this run's is " + model_shape.dump(),
      "resume with the same --model (or a fresh --out)");
  STRATA_CHECK(m.seed == opts.seed,
               "checkpoint '" + dir + "' was trained with --seed " + std::to_string(m.seed) + ", this run has " +
                   std::to_string(opts.seed),
               "the data order follows the seed: resume with --seed " + std::to_string(m.seed));
  // Low-rank adapters: the checkpoint's table is this run's only with the same adapters.
  const nlohmann::json saved_lora = m.run.contains("lora") ? m.run["lora"] : nlohmann::json();
  const LoraConfig lora = opts.lora_config();
  const nlohmann::json now_lora = opts.lora() ? nlohmann::json{{"rank", lora.rank},
                                                               {"alpha", lora.alpha},
                                                               {"dropout", lora.dropout},
                                                               {"targets", opts.lora_targets},
                                                               {"init", option_value(opts, "lora-init")}}
                                              : nlohmann::json();
  STRATA_CHECK(saved_lora.is_null() == now_lora.is_null() &&
                   (saved_lora.is_null() ||
                    (saved_lora["rank"] == now_lora["rank"] && saved_lora["targets"] == now_lora["targets"])),
               "checkpoint '" + dir + "' holds " +
                   (saved_lora.is_null() ? std::string("every weight") : "adapters " + saved_lora.dump()) +
                   "; this run trains " +
                   (now_lora.is_null() ? std::string("every weight") : "adapters " + now_lora.dump()),
               "resume with the checkpoint's --lora-rank and --lora-targets (or a fresh --out)");
  if (m.step >= opts.steps) {
    if (talk)
      std::fprintf(stderr, "strata: --resume: %s is at step %lld of --steps %lld: the run is complete, nothing to do\n",
                   dir.c_str(), (long long)m.step, (long long)opts.steps);
    p.complete = true;
    return p;
  }
  const int world = comm ? comm->size() : 1;
  std::string refused;
  for (const Difference& d : differences(m, opts, data_path, world)) {
    if (d.changes_result && !opts.allow_changes) {
      refused += (refused.empty() ? "" : "; ") + d.option + " " + d.now + " (checkpoint: " + d.saved + ")";
    } else if (talk) {
      std::fprintf(stderr, "strata: --resume: %s changes from %s to %s%s\n", d.option.c_str(), d.saved.c_str(),
                   d.now.c_str(), d.changes_result ? " (allowed by --allow-changes)" : "");
    }
  }
  STRATA_CHECK(refused.empty(), "--resume from '" + dir + "' would change what the run computes: " + refused,
               "resume with the checkpoint's settings, or pass --allow-changes to continue with the new ones");
  if (talk)
    std::fprintf(stderr, "strata: resumed from %s (step %lld of %lld, saved by %d rank(s) at ZeRO stage %d)\n",
                 dir.c_str(), (long long)m.step, (long long)opts.steps, m.world, m.zero_stage);
  return p;
}

}  // namespace strata
