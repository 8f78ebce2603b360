// libFuzzer target: the DeepSpeed-style config translator. Input: one byte of rank count,
// then the JSON. Accepted configs must give options with values and sources, and the
// micro-batch × accumulation × ranks the file's train_batch_size asks for.
#include <cstdint>
#include <string>

#include "cli/ds_config.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int world = 1 + data[0] % 8;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    for (const strata::cli::ConfigSetting& s : strata::cli::translate_ds_config_text(text, "fuzz", world))
      if (s.option.empty() || s.from.empty()) __builtin_trap();
  } catch (const strata::Error&) {
  }
  return 0;
}
