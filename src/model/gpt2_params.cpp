#include "model/gpt2_params.h"

namespace strata {

std::vector<ParamSpec> gpt2_param_specs(const GPT2Config& c) {
  const int64_t L = c.n_layer, C = c.n_embd, Vp = c.padded_vocab_size, T = c.max_seq_len;
  return {
      {"wte", {Vp, C}, true},         {"wpe", {T, C}, true},
      {"ln1w", {L, C}, false},        {"ln1b", {L, C}, false},
      {"qkvw", {L, 3 * C, C}, true},  {"qkvb", {L, 3 * C}, false},
      {"attprojw", {L, C, C}, true},  {"attprojb", {L, C}, false},
      {"ln2w", {L, C}, false},        {"ln2b", {L, C}, false},
      {"fcw", {L, 4 * C, C}, true},   {"fcb", {L, 4 * C}, false},
      {"fcprojw", {L, C, 4 * C}, true}, {"fcprojb", {L, C}, false},
      {"lnfw", {C}, false},           {"lnfb", {C}, false},
  };
}

}  // namespace strata
