#include "bench/suite_spec.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/text_file.h"

namespace strata::bench {

namespace {

using json = nlohmann::json;

void check_keys(const json& j, const std::set<std::string>& allowed, const std::string& where) {
  STRATA_CHECK(j.is_object(), where + " is not a JSON object", "see configs/bench/suite.json");
  for (const auto& [k, v] : j.items()) {
    if (allowed.count(k)) continue;
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
    throw_error(where + ": unknown key '" + k + "'", "the keys are " + list);
  }
}

template <typename T>
T get(const json& j, const char* key, T fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw_error(where + ": '" + key + "' has the wrong type (" + j.at(key).dump() + ")",
                "see configs/bench/suite.json for each key's type");
  }
}

int positive(int v, const char* key, const std::string& where) {
  STRATA_CHECK(v > 0, where + ": '" + key + "' must be positive, got " + std::to_string(v), "use a positive number");
  return v;
}

// A positive integer key, `fallback` when absent.
int positive_key(const json& j, const char* key, int fallback, const std::string& where) {
  return positive(get<int>(j, key, fallback, where), key, where);
}

int64_t bucket(const json& j, const char* key, int64_t fallback, const std::string& where) {
  const int64_t v = get<int64_t>(j, key, fallback, where);
  STRATA_CHECK(v > 0, where + ": '" + key + "' must be positive", "elements per bucket, e.g. 65536");
  return v;
}

int64_t persistence(const json& j, int64_t fallback, const std::string& where) {
  const int64_t v = get<int64_t>(j, "param_persistence_threshold", fallback, where);
  STRATA_CHECK(v >= 0, where + ": 'param_persistence_threshold' must not be negative", "0 partitions everything");
  return v;
}

void read_run_settings(const json& s, RunSettings& r, const std::string& where) {
  r.precision = get<std::string>(s, "precision", r.precision, where);
  STRATA_CHECK(r.precision == "f32" || r.precision == "bf16" || r.precision == "f16",
               where + ": precision '" + r.precision + "'", "use f32, bf16 or f16");
  r.micro_batch = positive_key(s, "micro_batch", r.micro_batch, where);
  r.seq_len = positive_key(s, "seq_len", r.seq_len, where);
  r.steps = positive_key(s, "steps", r.steps, where);
  r.device_mem = get<std::string>(s, "device_mem", r.device_mem, where);
  r.reduce_bucket_size = bucket(s, "reduce_bucket_size", r.reduce_bucket_size, where);
  r.allgather_bucket_size = bucket(s, "allgather_bucket_size", r.allgather_bucket_size, where);
  r.param_persistence_threshold = persistence(s, r.param_persistence_threshold, where);
}

}  // namespace

SuiteSpec load_suite(const std::string& path, const std::string& mode) {
  json root;
  try {
    root = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    throw_error("suite '" + path + "': invalid JSON (" + e.what() + ")", "fix the file");
  }
  check_keys(root, {"comment", "quick", "full"}, "suite '" + path + "'");
  STRATA_CHECK(root.contains(mode), "suite '" + path + "' has no '" + mode + "' section", "add one");
  const std::string at = "suite '" + path + "', " + mode;
  const json& m = root[mode];
  check_keys(m, {"comment", "sweeps", "scaling"}, at);
  SuiteSpec spec;
  for (const json& s : get<json>(m, "sweeps", json::array(), at)) {
    const std::string name = get<std::string>(s, "name", "sweep", at);
    const std::string where = at + ", sweep '" + name + "'";
    check_keys(s,
               {"name", "comment", "models", "stages", "offload", "checkpointing", "ranks", "precision", "micro_batch",
                "seq_len", "steps", "device_mem", "reduce_bucket_size", "allgather_bucket_size",
                "param_persistence_threshold"},
               where);
    SuiteRun base;
    base.sweep = name;
    read_run_settings(s, base, where);
    const auto models = get<std::vector<std::string>>(s, "models", {}, where);
    const auto stages = get<std::vector<int>>(s, "stages", {0}, where);
    const auto offloads = get<std::vector<std::string>>(s, "offload", {"none"}, where);
    const auto ckpts = get<std::vector<bool>>(s, "checkpointing", {false}, where);
    const auto ranks = get<std::vector<int>>(s, "ranks", {1}, where);
    STRATA_CHECK(!models.empty(), where + " names no models", "give \"models\": [\"scaled/gpt-1.5b\", ...]");
    for (int st : stages) STRATA_CHECK(st >= 0 && st <= 3, where + ": stage " + std::to_string(st), "use 0-3");
    for (int r : ranks) positive(r, "ranks", where);
    for (const std::string& o : offloads)
      STRATA_CHECK(o == "none" || o == "cpu" || o == "nvme" || o == "cpu+param" || o == "nvme+param",
                   where + ": offload '" + o + "'", "use none, cpu, nvme, cpu+param or nvme+param");
    for (const std::string& model : models)
      for (int st : stages)
        for (const std::string& o : offloads) {
          // Combinations ZeRO has no meaning for are left out, as strata plan does.
          if ((st == 0 && o != "none") || (o.ends_with("+param") && st != 3)) continue;
          for (bool c : ckpts)
            for (int r : ranks) {
              SuiteRun run = base;
              run.model = model, run.stage = st, run.offload = o, run.checkpointing = c, run.ranks = r;
              spec.runs.push_back(run);
            }
        }
  }
  if (m.contains("scaling")) {
    const json& s = m["scaling"];
    const std::string where = at + ", scaling";
    check_keys(s,
               {"comment", "n_embd", "n_head", "vocab_size", "n_positions", "device_mem", "stages", "ranks",
                "max_layers", "micro_batch", "seq_len", "steps", "precision", "reduce_bucket_size",
                "allgather_bucket_size", "param_persistence_threshold"},
               where);
    ScalingSpec& c = spec.scaling;
    c.enabled = true;
    c.n_embd = positive_key(s, "n_embd", c.n_embd, where);
    c.n_head = positive_key(s, "n_head", c.n_head, where);
    c.vocab_size = positive_key(s, "vocab_size", c.vocab_size, where);
    c.n_positions = positive_key(s, "n_positions", c.n_positions, where);
    c.stages = get<std::vector<int>>(s, "stages", c.stages, where);
    c.ranks = get<std::vector<int>>(s, "ranks", c.ranks, where);
    c.max_layers = positive_key(s, "max_layers", c.max_layers, where);
    read_run_settings(s, c, where);
    STRATA_CHECK(c.seq_len <= c.n_positions, where + ": seq_len exceeds n_positions", "raise n_positions");
    for (int st : c.stages) STRATA_CHECK(st >= 0 && st <= 3, where + ": stage " + std::to_string(st), "use 0-3");
    for (int r : c.ranks) positive(r, "ranks", where);
  }
  STRATA_CHECK(!spec.runs.empty() || spec.scaling.enabled, at + " has neither sweeps nor scaling",
               "add a sweep or a scaling section");
  return spec;
}

}  // namespace strata::bench
