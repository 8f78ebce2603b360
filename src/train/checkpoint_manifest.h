// A checkpoint's manifest.json: the trainer state and every file's size and xxHash64
// (checkpoint.h has the layout and the save protocol). Only JSON here: the manifest fuzzer
// links this alone.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace strata {

struct CheckpointFile {
  std::string name;
  uint64_t bytes = 0, xxh64 = 0;
};

struct CheckpointManifest {
  int64_t step = 0;     // completed steps
  int64_t applied = 0;  // optimizer updates (fp16 may skip some)
  int64_t samples = 0;  // global samples consumed
  int world = 1, zero_stage = 0;
  int64_t num_params = 0;
  uint64_t seed = 0;
  nlohmann::json model;        // the model's shape (checked on resume)
  nlohmann::json loss_scaler;  // LossScaler::state()
  nlohmann::json run;          // the options that shaped the run (for --print and checks)
  std::vector<CheckpointFile> files;

  nlohmann::json to_json() const;
  // Parses and validates a manifest (the fuzzed entry point): every key present with its
  // type, file names plain; throws Error naming `origin`.
  static CheckpointManifest parse(const std::string& text, const std::string& origin);
};

}  // namespace strata
