// DeepSpeed-style JSON configs (`strata train --config FILE.json`) translated into Strata's
// own command-line options, which stay the single source of truth: the CLI parses the
// result like anything typed, and values given on the command line win.
//
// Every key is either mapped, accepted because it asks for what Strata always does (say
// `contiguous_gradients: true`), refused as understood-but-not-implemented, or unknown (an
// error suggesting the nearest valid key). Nothing is silently ignored.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata::cli {

struct ConfigSetting {
  std::string option;              // Strata's option, without "--"
  std::string value;               // as it would be typed
  std::string from;                // "FILE: zero_optimization.stage", or "deepspeed default (...)"
  bool deepspeed_default = false;  // the file left it out: DeepSpeed's default stands in
};

// `world`: data-parallel ranks (train_batch_size = micro-batch × accumulation × world).
// `hidden`: the model's hidden size, for "auto" bucket sizes (0: unknown). `notes` gets one
// line per key that was "auto" or accepted with a note (--print-config prints them).
// Throws strata::Error naming the file and key.
std::vector<ConfigSetting> translate_ds_config(const std::string& path, int world, int64_t hidden = 0,
                                               std::vector<std::string>* notes = nullptr);
// The same on the file's text (`origin` names it in messages; the fuzzed entry point).
std::vector<ConfigSetting> translate_ds_config_text(const std::string& text, const std::string& origin, int world,
                                                    int64_t hidden = 0, std::vector<std::string>* notes = nullptr);

// Levenshtein distance, for "did you mean" hints.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace strata::cli
