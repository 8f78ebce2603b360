// `strata train`: the option registry (train/option_registry.h) generates the help and
// parses every value; values are then checked strictly, and any error names the option.
#include <cstdio>
#include <cstdlib>
#include <cxxopts.hpp>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/device.h"
#include "cli/commands.h"
#include "cli/ds_config.h"
#include "comm/mpi_comm.h"
#include "core/error.h"
#include "core/parse.h"
#include "core/text_file.h"
#include "model/model_spec.h"
#include "train/option_registry.h"
#include "train/peft_import.h"
#include "train/run_summary.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace strata::cli {

// Ranks as the launcher announces them, before MPI starts (a config's train_batch_size
// needs it to derive the micro-batch or the accumulation).
static int launched_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
  return 1;
}

int train_main(int argc, char** argv) {
  cxxopts::Options o("strata train",
                     "Train a GPT-2 or Llama model. With no options: the embedded default model and data.");
  // Every training option comes from the registry (train/option_registry.h); values are
  // taken as strings and parsed strictly by its parsers, so "--steps 1x" is an error.
  auto str = [](const std::string& v) { return cxxopts::value<std::string>()->default_value(v); };
  o.add_options()("config",
                  "a DeepSpeed-style JSON config, mapped onto these options (values given here win; unknown or "
                  "unimplemented keys are errors)",
                  str(""))("print-config", "print every option's resolved value and where it came from, then exit");
  for (const TrainOption& d : train_options()) {
    if (d.flag)
      o.add_options()(d.name, d.help);
    else
      o.add_options()(d.name, d.help, str(d.default_value));
  }
  o.add_options()("summary",
                  "write the run's summary to this JSON file: tokens/s, TFLOP/s per device, MFU, peak bytes per tier, "
                  "collective bytes, overlap (first step untimed; strata bench suite reads it)",
                  str(""))("peak-tflops", "the device's peak TFLOP/s for the summary's MFU (0 = unknown: no MFU)",
                           str("0"))("h,help", "show this help");
  cxxopts::ParseResult r;
  if (auto done = parse_options(o, argc, argv, "train", r)) return *done;
  // A config file becomes more arguments, placed only where the command line gave none, and
  // the whole is parsed again: one parser, one set of checks, the options stay the truth.
  const cxxopts::ParseResult typed = r;
  std::vector<ConfigSetting> from_config;
  std::vector<std::string> injected, config_notes;
  if (const std::string config = r["config"].as<std::string>(); !config.empty()) {
    try {
      // "auto" bucket sizes follow the model's hidden size, as the HF Trainer sets them.
      int64_t hidden = 0;
      try {
        hidden = ModelSpec::load(resolve_model(r["model"].as<std::string>())).n_embd();
      } catch (const Error&) {  // a bad --model is reported later, by the run itself
      }
      from_config = translate_ds_config(config, launched_world_size(), hidden, &config_notes);
    } catch (const Error& e) {
      return usage_error("train", e.what_failed() + (e.hint().empty() ? "" : " (" + e.hint() + ")"));
    }
    std::vector<std::string> flags;
    for (const auto& g : o.groups())
      for (const auto& h : o.group_help(g).options)
        if (h.is_boolean) flags.push_back(h.l.front());
    for (const ConfigSetting& c : from_config) {
      if (typed.count(c.option)) continue;
      if (std::find(flags.begin(), flags.end(), c.option) != flags.end()) {
        if (c.value == "true") injected.push_back("--" + c.option);
      } else {
        injected.push_back("--" + c.option + "=" + c.value);
      }
    }
    std::vector<const char*> args(argv, argv + argc);
    for (const std::string& a : injected) args.push_back(a.c_str());
    if (auto done = parse_options(o, int(args.size()), const_cast<char**>(args.data()), "train", r)) return *done;
  }
  if (r.count("print-config")) {
    for (const auto& g : o.groups())
      for (const auto& h : o.group_help(g).options) {
        const std::string& name = h.l.front();
        if (name == "help" || name == "print-config" || name == "config") continue;
        const std::string value = h.is_boolean ? (r.count(name) ? "true" : "false") : r[name].as<std::string>();
        std::string from = typed.count(name) ? "command line" : "default";
        for (const ConfigSetting& c : from_config)
          if (c.option == name && !typed.count(name)) from = c.from;
        std::printf("--%-30s %-24s %s\n", name.c_str(), value.c_str(), from.c_str());
      }
    for (const std::string& n : config_notes) std::printf("# %s\n", n.c_str());
    return 0;
  }
  TrainOptions t;
  const std::string summary = r["summary"].as<std::string>();
  double peak_tflops = 0;
  try {
    for (const TrainOption& d : train_options())
      d.set(t, d.flag ? (r.count(d.name) ? "true" : "false") : r[d.name].as<std::string>());
    if (!t.lora_adapter.empty()) apply_peft_adapter_config(t.lora_adapter, t);
    validate_options(t);       // every range, in one place
    resolve_device(t.device);  // cuda where this build or machine lacks it: say which, now
    peak_tflops = parse_double(r["peak-tflops"].as<std::string>(), "--peak-tflops");
    STRATA_CHECK(peak_tflops >= 0,
                 "--peak-tflops: " + r["peak-tflops"].as<std::string>() + " is out of range: must not be negative",
                 "0 = unknown");
  } catch (const Error& e) {
    // A value the config file gave is named by its key too, so the user knows what to edit.
    std::string from;
    for (const ConfigSetting& c : from_config)
      if (!typed.count(c.option) && e.what_failed().starts_with("--" + c.option + ":")) from = " [" + c.from + "]";
    return usage_error("train", e.what_failed() + from + (e.hint().empty() ? "" : " (" + e.hint() + ")"));
  }
  // SIGINT/SIGTERM: every rank finishes its step, saves (with --save-every) and exits 128+N.
  // Before MPI starts, so that its threads, like all later ones, leave the signals to one.
  install_stop_handlers();
  // Under mpirun/srun every rank trains its slice of the global batch.
  std::unique_ptr<MpiComm> comm;
  if (MpiComm::launched_by_mpi()) comm = std::make_unique<MpiComm>(MpiCommOptions{t.comm_timeout, true, true});
  TrainContext context;
  context.comm = comm.get();
  const TrainResult result = train(t, context);
  if (!summary.empty() && !result.steps.empty()) {
    const nlohmann::ordered_json j =
        summarize_run(t, comm.get(), result, ModelSpec::load(resolve_model(t.model)), peak_tflops * 1e12);
    if (!comm || comm->rank() == 0) write_text_file(summary, j.dump(2) + "\n");
  }
  return result.stop_signal ? 128 + result.stop_signal : 0;
}

}  // namespace strata::cli
