// Every `strata train` option declared once: its name, the TrainOptions field it sets, its
// default, its parser, its check, its help and the DeepSpeed key that maps to it. The CLI
// builds its parser, --help and --print-config from this table, `strata plan` takes the
// options it shares from it, validate_options runs every option's check from it, and tests
// hold the option tables of README.md and docs/ and the --config mapping to it.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "train/trainer.h"

namespace strata {

struct TrainOption {
  std::string name;           // without "--"
  std::string help;           // one line for --help
  std::string default_value;  // as typed, for --help and --print-config ("" for flags)
  bool flag = false;          // present = true; takes no value
  std::string deepspeed;      // the DeepSpeed config key that maps to it ("" if none)
  // Parses a value as typed into the field; throws naming the option. Flags get "true".
  std::function<void(TrainOptions&, const std::string&)> set;
  // The field's value as it would be typed (flags: "true" or "false").
  std::function<std::string(const TrainOptions&)> get;
  // The field's range, on any TrainOptions (in-process callers too); throws naming the option.
  std::function<void(const TrainOptions&)> check;
};

// In --help order.
const std::vector<TrainOption>& train_options();
// The option called `name` (without "--"); null when there is none.
const TrainOption* find_train_option(std::string_view name);
// Option `name`'s value in `o` as it would be typed (checkpoint manifests, messages).
std::string option_value(const TrainOptions& o, std::string_view name);

}  // namespace strata
