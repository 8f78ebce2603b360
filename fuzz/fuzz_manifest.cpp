// libFuzzer target: the checkpoint manifest reader. Accepted manifests must survive a
// round trip through to_json() unchanged.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "train/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const strata::CheckpointManifest m = strata::CheckpointManifest::parse(text, "fuzz");
    const nlohmann::json j = m.to_json();
    const strata::CheckpointManifest back = strata::CheckpointManifest::parse(j.dump(), "fuzz round trip");
    if (back.to_json() != j) __builtin_trap();
  } catch (const strata::Error&) {
  }
  return 0;
}
