#include "train/checkpoint_manifest.h"

#include <algorithm>

#include "core/error.h"
#include "io/safetensors.h"  // hex64

namespace strata {
namespace {

constexpr const char* kFormat = "strata-checkpoint";
constexpr int kVersion = 1;

}  // namespace

nlohmann::json CheckpointManifest::to_json() const {
  nlohmann::json files_j = nlohmann::json::array();
  for (const CheckpointFile& f : files)
    files_j.push_back({{"name", f.name}, {"bytes", f.bytes}, {"xxh64", io::hex64(f.xxh64)}});
  return {{"format", kFormat},        {"version", kVersion},        {"step", step},
          {"applied", applied},       {"samples", samples},         {"world", world},
          {"zero_stage", zero_stage}, {"num_params", num_params},   {"seed", seed},
          {"model", model},           {"loss_scaler", loss_scaler}, {"run", run},
          {"files", files_j}};
}

CheckpointManifest CheckpointManifest::parse(const std::string& text, const std::string& origin) {
  const std::string where = "checkpoint manifest '" + origin + "'";
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  STRATA_CHECK(!j.is_discarded() && j.is_object(), where + " is not a JSON object",
               "the manifest is corrupted: resume from an older checkpoint (delete this one)");
  auto need = [&](const char* key, bool ok) {
    STRATA_CHECK(j.contains(key) && ok, where + ": '" + key + "' is missing or has the wrong type",
                 "the manifest is corrupted or from another program");
  };
  need("format", j.contains("format") && j["format"].is_string());
  STRATA_CHECK(j["format"] == kFormat, where + ": format " + j["format"].dump() + ", expected \"" + kFormat + "\"",
               "this directory is not a Strata checkpoint");
  need("version", j.contains("version") && j["version"].is_number_integer());
  STRATA_CHECK(j["version"] == kVersion,
               where + ": version " + j["version"].dump() + " is not " + std::to_string(kVersion),
               "resume with the Strata version that wrote it");
  auto integer = [&](const char* key, int64_t lo) {
    need(key, j.contains(key) && j[key].is_number_integer());
    const int64_t v = j[key].get<int64_t>();
    STRATA_CHECK(v >= lo, where + ": '" + key + "' = " + std::to_string(v) + " is out of range",
                 "the manifest is corrupted");
    return v;
  };
  CheckpointManifest m;
  m.step = integer("step", 0);
  m.applied = integer("applied", 0);
  m.samples = integer("samples", 0);
  m.world = int(std::min<int64_t>(integer("world", 1), 1 << 20));
  m.zero_stage = int(integer("zero_stage", 0));
  STRATA_CHECK(m.zero_stage <= 3, where + ": zero_stage " + std::to_string(m.zero_stage), "the manifest is corrupted");
  m.num_params = integer("num_params", 1);
  need("seed", j.contains("seed") && j["seed"].is_number_unsigned());
  m.seed = j["seed"].get<uint64_t>();
  need("model", j.contains("model") && j["model"].is_object());
  m.model = j["model"];
  need("loss_scaler", j.contains("loss_scaler") && j["loss_scaler"].is_object());
  m.loss_scaler = j["loss_scaler"];
  need("run", j.contains("run") && j["run"].is_object());
  m.run = j["run"];
  need("files", j.contains("files") && j["files"].is_array() && !j["files"].empty());
  for (const auto& f : j["files"]) {
    STRATA_CHECK(f.is_object() && f.contains("name") && f["name"].is_string() && f.contains("bytes") &&
                     f["bytes"].is_number_unsigned() && f.contains("xxh64") && f["xxh64"].is_string(),
                 where + ": a files entry lacks name, bytes or xxh64", "the manifest is corrupted");
    CheckpointFile cf;
    cf.name = f["name"].get<std::string>();
    STRATA_CHECK(!cf.name.empty() && cf.name.find('/') == std::string::npos && cf.name[0] != '.',
                 where + ": file name '" + cf.name + "' is not a plain file name", "the manifest is corrupted");
    cf.bytes = f["bytes"].get<uint64_t>();
    const std::string h = f["xxh64"].get<std::string>();
    STRATA_CHECK(h.size() == 16 && h.find_first_not_of("0123456789abcdef") == std::string::npos,
                 where + ": checksum '" + h + "' of " + cf.name + " is not 16 hex digits", "the manifest is corrupted");
    cf.xxh64 = std::stoull(h, nullptr, 16);
    m.files.push_back(cf);
  }
  return m;
}

}  // namespace strata
