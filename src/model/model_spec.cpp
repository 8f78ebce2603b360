#include "model/model_spec.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace strata {

ModelSpec ModelSpec::load(const std::string& path) {
  const std::string file = std::filesystem::is_directory(path) ? path + "/config.json" : path;
  std::ifstream f(file);
  STRATA_CHECK(f.good(), "cannot open model config '" + file + "'",
               "pass --model with a JSON file such as configs/default.json, a Hugging Face model directory, or a named "
               "size from configs/bench such as gpt-1.5b");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), file);
}

ModelSpec ModelSpec::from_json_text(const std::string& text, const std::string& origin) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  STRATA_CHECK(!j.is_discarded(), "model config '" + origin + "' is not valid JSON", "fix the file's syntax");
  ModelSpec s;
  // A Hugging Face config names its family by model_type; Strata's own JSON of a decoder says
  // "arch": "llama" (with the model_type when it is not Llama's); the rest is GPT-2's.
  if (j.is_object() && j.contains("model_type") && j["model_type"].is_string())
    s.family = &model_family(j["model_type"].get<std::string>(), origin);
  else if (j.is_object() && j.contains("arch") && j["arch"] == "llama")
    s.family = &model_family("llama", origin);
  s.family->read_config(text, origin, s);
  return s;
}

double ModelSpec::matmul_params() const {
  const std::vector<LinearShape> ls = family->linears(*this);
  double n = 0;
  for (const LinearShape& l : ls) n += double(l.in) * double(l.out) * l.count;
  // The head's padded rows are never a token's: they are left out.
  return n - double(padded_vocab_size() - vocab_size()) * double(ls.back().in);
}

double ModelSpec::training_flops_per_token(int seq_len, bool recompute) const {
  const double forward = 2 * matmul_params() + 4.0 * n_layer() * double(seq_len) * n_embd();
  return (recompute ? 4 : 3) * forward;
}

bool ModelSpec::head_is_embedding() const {
  return family->model_class() == ModelClass::decoder ? llama.tied : true;  // GPT-2 ties its head
}

}  // namespace strata
