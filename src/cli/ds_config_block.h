// One block (JSON object) of a DeepSpeed config being read: every key is claimed by exactly
// one handler (mapped, accepted with a note, or refused as not implemented); finish() makes
// any other key an error naming the nearest known one. Notes collect what --print-config
// says besides the settings.
#pragma once
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/ds_config.h"
#include "core/error.h"

namespace strata::cli {

// What the translation says besides its settings: keys that were "auto" (the Hugging Face
// Trainer fills them from its own arguments) and keys accepted with a note.
struct Notes {
  std::vector<std::string> autos;  // their paths, e.g. "optimizer.params.lr"
  std::vector<std::string> lines;  // "FILE: key = value: note"
};

class Block {
 public:
  using json = nlohmann::json;
  Block(const json& j, std::string path, std::string file, Notes& notes)
      : j_(j), path_(std::move(path)), file_(std::move(file)), notes_(notes) {
    STRATA_CHECK(j.is_object(), where("") + " must be a JSON object", "see the DeepSpeed config reference");
  }
  std::string path_of(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // An accepted key: it concerns only speed or DeepSpeed's internals, or asks for what Strata
  // does; --print-config says so in one line.
  void accept(const std::string& key, const std::string& note) {
    if (const json* v = get(key)) notes_.lines.push_back(from(key) + " = " + v->dump() + ": " + note);
  }
  void note(const std::string& key, const std::string& text) { notes_.lines.push_back(from(key) + ": " + text); }
  std::string where(const std::string& key) const {
    const std::string p = path_.empty() ? key : key.empty() ? path_ : path_ + "." + key;
    return "config '" + file_ + "': " + (p.empty() ? std::string("the top level") : "'" + p + "'");
  }
  std::string from(const std::string& key) const { return file_ + ": " + (path_.empty() ? key : path_ + "." + key); }
  const json* get(const std::string& key) {
    known_.push_back(key);
    auto it = j_.find(key);
    if (it == j_.end()) return nullptr;
    // Hugging Face's "auto": the Trainer fills it from its arguments. Read as absent here;
    // resolve_autos() below fills it as the Trainer would and says how.
    if (it->is_string() && it->get<std::string>() == "auto") {
      notes_.autos.push_back(path_of(key));
      return nullptr;
    }
    return &*it;
  }
  // Keys Strata understands but does not implement: refused unless they ask for what Strata
  // does anyway (`accepted(value)`).
  template <typename Accept>
  void unsupported(const std::string& key, Accept accepted, const std::string& why) {
    if (const json* v = get(key))
      STRATA_CHECK(accepted(*v), where(key) + " = " + v->dump() + " is not implemented in Strata", why);
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (std::find(known_.begin(), known_.end(), it.key()) != known_.end()) continue;
      if (it.key().starts_with("_")) {  // "_comment" and the like: notes for people
        notes_.lines.push_back(from(it.key()) + ": a comment (keys starting with '_' are not settings)");
        continue;
      }
      std::string best;
      size_t best_d = SIZE_MAX;
      for (const std::string& k : known_)
        if (size_t d = edit_distance(it.key(), k); d < best_d) best_d = d, best = k;
      const bool near = best_d <= std::max<size_t>(2, it.key().size() / 4);
      // DeepSpeed reads the top level key by key and ignores the rest (its blocks forbid
      // extras), so a top-level key that is no near miss of a known one is passed over,
      // with a note; a near miss is a typo that would silently change the run.
      if (path_.empty() && !near) {
        notes_.lines.push_back(from(it.key()) + " = " + it.value().dump().substr(0, 60) +
                               ": not a DeepSpeed setting Strata knows; ignored, as DeepSpeed ignores it");
        continue;
      }
      throw_error(where(it.key()) + " is not a key Strata knows",
                  near ? "did you mean '" + best + "'?" : "see the table of config keys in docs/deepspeed-configs.md");
    }
  }
  double number(const std::string& key, const json& v) const {
    STRATA_CHECK(v.is_number(), where(key) + " = " + v.dump() + " is not a number", "give a number");
    return v.get<double>();
  }
  // Integers may be written 5e8, as DeepSpeed's examples do.
  long long integer(const std::string& key, const json& v) const {
    const double d = number(key, v);
    STRATA_CHECK(d == std::floor(d) && std::fabs(d) < 9e15, where(key) + " = " + v.dump() + " is not an integer",
                 "give a whole number");
    return (long long)d;
  }
  bool boolean(const std::string& key, const json& v) const {
    STRATA_CHECK(v.is_boolean(), where(key) + " = " + v.dump() + " is not true or false", "give true or false");
    return v.get<bool>();
  }
  std::string string(const std::string& key, const json& v) const {
    STRATA_CHECK(v.is_string(), where(key) + " = " + v.dump() + " is not a string", "give a string");
    return v.get<std::string>();
  }

 private:
  const json& j_;
  std::string path_, file_;
  Notes& notes_;
  std::vector<std::string> known_;
};

}  // namespace strata::cli
