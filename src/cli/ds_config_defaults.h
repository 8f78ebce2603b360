// The two halves of --config that do not read keys one by one (ds_config.cpp does that):
// Hugging Face's "auto" values filled in as the HF Trainer fills them, and DeepSpeed's own
// defaults for what the file leaves out, so a config means what it means under DeepSpeed.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/ds_config.h"

namespace strata::cli {

// set(option, value, from): one setting (ds_config.cpp's, which refuses a contradiction).
using SetOption = std::function<void(const std::string&, const std::string&, const std::string&)>;

// Each "auto" path (as "optimizer.params.lr") is what the HF Trainer fills from its own
// arguments: here Strata's options (typed or default), so nothing is set, or from the model
// (bucket sizes from the hidden size; 0 when unknown). `options` gets each option an auto
// stands for (no DeepSpeed default may replace it); `notes` a line per auto.
void resolve_autos(const std::vector<std::string>& autos, const std::string& file, int64_t hidden, const SetOption& set,
                   std::set<std::string>& options, std::vector<std::string>& notes);

// DeepSpeed's defaults (deepspeed/runtime/constants.py, zero/config.py, lr_schedules.py) for
// every setting that changes the result and that neither the file nor an "auto" gave,
// marked deepspeed_default. Speed- and memory-only knobs keep Strata's values, said in `notes`.
void add_deepspeed_defaults(const nlohmann::json& config, const std::string& file, std::vector<ConfigSetting>& out,
                            const std::set<std::string>& auto_options, std::vector<std::string>& notes);

}  // namespace strata::cli
