// `strata export CHECKPOINT --out FILE_OR_DIR`: a sharded checkpoint (any world size or
// stage) consolidated into Hugging Face safetensors, one tensor at a time.
#include <cstdio>
#include <cxxopts.hpp>
#include <filesystem>

#include "backend/device.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/parse.h"
#include "model/hf_export.h"
#include "model/hf_weights.h"
#include "model/init_weights.h"
#include "train/checkpoint.h"
#include "train/lora_merge.h"
#include "train/option_registry.h"
#include "train/peft_export.h"
#include "train/trainer.h"

namespace strata::cli {

int export_main(int argc, char** argv) {
  cxxopts::Options o("strata export",
                     "Consolidate a checkpoint into Hugging Face safetensors (GPT-2 or Llama names). CHECKPOINT is a "
                     "checkpoint directory, or a training --out directory (its newest complete checkpoint).");
  o.add_options()("checkpoint", "checkpoint directory", cxxopts::value<std::string>())(
      "source",
      "the Hugging Face model directory the run started from (default: the one the checkpoint records): its "
      "tokenizer files, generation_config.json and special token ids go into the export",
      cxxopts::value<std::string>()->default_value(""))(
      "out",
      "a .safetensors file, or a directory (config.json and model.safetensors, or shards with "
      "model.safetensors.index.json)",
      cxxopts::value<std::string>())("dtype", "f32 | bf16 | f16", cxxopts::value<std::string>()->default_value("f32"))(
      "max-shard-size", "largest weight file in a directory export, as save_pretrained (5GB = 5e9 bytes; 2GiB)",
      cxxopts::value<std::string>()->default_value("5GB"))(
      "merge",
      "an adapter checkpoint: write the whole model with the adapters merged into the weights they were trained on "
      "(--source, default: the model directory the checkpoint records), instead of PEFT's adapter directory")(
      "model",
      "with --init random and no checkpoint: a model config (or a named model) whose --seed initialisation is "
      "written, as strata train --init random starts it",
      cxxopts::value<std::string>()->default_value(""))("init", "random (with --model)",
                                                        cxxopts::value<std::string>()->default_value(""))(
      "seed", "the initialisation's seed (with --model; strata train's default)",
      cxxopts::value<std::string>()->default_value(find_train_option("seed")->default_value))("h,help",
                                                                                              "show this help");
  o.parse_positional({"checkpoint"});
  o.positional_help("CHECKPOINT");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "export", r)) return *done;
  const std::string model = r["model"].as<std::string>(), init = r["init"].as<std::string>();
  if (!r.count("out")) return usage_error("export", "give --out FILE.safetensors or --out DIR");
  if (model.empty() != init.empty() || (!init.empty() && init != "random"))
    return usage_error("export", "give --model CONFIG with --init random (a model's initialisation), or neither");
  if (!model.empty() && r.count("checkpoint"))
    return usage_error("export", "give a checkpoint or --model CONFIG --init random, not both");
  if (model.empty() && !r.count("checkpoint")) return usage_error("export", "give the checkpoint directory");
  const std::string dtype = r["dtype"].as<std::string>();
  if (dtype != "f32" && dtype != "bf16" && dtype != "f16")
    return usage_error("export", "--dtype: '" + dtype + "' is not f32, bf16 or f16");
  size_t max_shard = 0;
  try {
    max_shard = parse_bytes(r["max-shard-size"].as<std::string>(), "--max-shard-size");
  } catch (const Error& e) {
    return usage_error("export", e.what_failed());
  }
  if (max_shard == 0) return usage_error("export", "--max-shard-size must be positive");
  if (!model.empty()) {  // no checkpoint: the model as --init random starts it
    const ModelSpec spec = ModelSpec::load(resolve_model(model));
    uint64_t seed = 0;
    try {
      seed = uint64_t(parse_int(r["seed"].as<std::string>(), "--seed", 0));
    } catch (const Error& e) {
      return usage_error("export", e.what_failed());
    }
    const std::unique_ptr<Backend> host = make_backend("cpu", {size_t(1) << 30, 1, 0});
    const InitWeights weights(spec, *host, seed);
    const std::string out = r["out"].as<std::string>();
    export_hf(spec, weights, out, parse_dtype(dtype), max_shard);
    std::fprintf(stderr, "strata export: %s initialised from --seed %llu -> %s (%s)\n", model.c_str(),
                 (unsigned long long)seed, out.c_str(), dtype.c_str());
    return 0;
  }
  std::string dir = r["checkpoint"].as<std::string>();
  if (!std::filesystem::exists(std::filesystem::path(dir) / "manifest.json")) {
    std::string newest = newest_checkpoint(dir);
    // OUT/checkpoints: the newest of them, as for OUT.
    if (newest.empty() && std::filesystem::path(dir).lexically_normal().filename() == "checkpoints")
      newest = newest_checkpoint(std::filesystem::path(dir).lexically_normal().parent_path().string());
    if (newest.empty() && std::filesystem::path(dir).lexically_normal().filename().empty())  // "OUT/checkpoints/"
      newest = newest_checkpoint(std::filesystem::path(dir).lexically_normal().parent_path().parent_path().string());
    STRATA_CHECK(!newest.empty(), "'" + dir + "' is neither a checkpoint nor an --out directory with one",
                 "train with --save-every N, then export OUT or OUT/checkpoints/step-N");
    dir = newest;
  }
  CheckpointReader ck(dir, nullptr);
  const ModelSpec spec = ModelSpec::from_json_text(ck.manifest().model.dump(), dir + "/manifest.json");
  const std::string out = r["out"].as<std::string>();
  std::string source = r["source"].as<std::string>();
  if (source.empty() && ck.manifest().run.contains("model_dir") && ck.manifest().run["model_dir"].is_string())
    source = ck.manifest().run["model_dir"].get<std::string>();
  const bool merge = r.count("merge") > 0;
  if (merge && !holds_adapters(ck.manifest())) return usage_error("export", "--merge: " + dir + " holds no adapters");
  std::unique_ptr<HfWeights> base;
  std::unique_ptr<LoraMerged> merged;
  if (merge) {  // the base's weights plus the adapters, as one model
    STRATA_CHECK(!source.empty() && is_hf_model_dir(source),
                 "--merge: " + (source.empty() ? std::string("the checkpoint records no model directory")
                                               : "'" + source + "' is not a Hugging Face model directory"),
                 "give --source the model directory the run started from");
    base = std::make_unique<HfWeights>(source, spec);
    merged = std::make_unique<LoraMerged>(ck.manifest(), spec, *base, ck.source(0));
  } else if (holds_adapters(ck.manifest())) {  // low-rank adapters: PEFT's adapter directory
    STRATA_CHECK(out.ends_with(".safetensors") == false,
                 "--out " + out +
                     ": adapters are written as a directory (adapter_config.json and "
                     "adapter_model.safetensors)",
                 "give --out DIR");
    export_peft(ck.manifest(), ck.source(0), spec, out, parse_dtype(dtype));
    std::fprintf(stderr, "strata export: the adapters of step %lld of %s -> %s (PEFT, %s)\n",
                 (long long)ck.manifest().step, dir.c_str(), out.c_str(), dtype.c_str());
    return 0;
  }
  export_hf(spec, merged ? static_cast<const FlatSource&>(*merged) : ck.source(0), out, parse_dtype(dtype), max_shard);
  if (std::filesystem::is_directory(out) && !source.empty()) {
    try {
      for (const std::string& line : carry_model_files(source, out))
        std::fprintf(stderr, "strata export: %s\n", line.c_str());
    } catch (const Error& e) {
      return usage_error("export", e.what_failed() + " (" + e.hint() + ")");
    }
  }
  std::fprintf(stderr, "strata export: step %lld of %s -> %s (%s%s)\n", (long long)ck.manifest().step, dir.c_str(),
               out.c_str(), dtype.c_str(), merge ? ", the adapters merged" : "");
  return 0;
}

}  // namespace strata::cli
