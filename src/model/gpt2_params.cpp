#include "model/gpt2_params.h"

namespace strata {

std::vector<ParamSpec> gpt2_param_specs(const GPT2Config& c) {
  const int64_t L = c.n_layer, C = c.n_embd, Vp = c.padded_vocab_size, T = c.max_seq_len;
  using P = GPT2Param;
  return {
      {"wte", {Vp, C}, true, int(P::wte)},
      {"wpe", {T, C}, true, int(P::wpe)},
      {"ln1w", {L, C}, false, int(P::ln1w)},
      {"ln1b", {L, C}, false, int(P::ln1b)},
      {"qkvw", {L, 3 * C, C}, true, int(P::qkvw)},
      {"qkvb", {L, 3 * C}, false, int(P::qkvb)},
      {"attprojw", {L, C, C}, true, int(P::attprojw)},
      {"attprojb", {L, C}, false, int(P::attprojb)},
      {"ln2w", {L, C}, false, int(P::ln2w)},
      {"ln2b", {L, C}, false, int(P::ln2b)},
      {"fcw", {L, 4 * C, C}, true, int(P::fcw)},
      {"fcb", {L, 4 * C}, false, int(P::fcb)},
      {"fcprojw", {L, C, 4 * C}, true, int(P::fcprojw)},
      {"fcprojb", {L, C}, false, int(P::fcprojb)},
      {"lnfw", {C}, false, int(P::lnfw)},
      {"lnfb", {C}, false, int(P::lnfb)},
  };
}

std::vector<ParamSpec> gpt2_unit_layout(const GPT2Config& c) {
  const std::vector<ParamSpec> llmc = gpt2_param_specs(c);
  std::vector<ParamSpec> out;
  auto global = [&](GPT2Param p, int unit) {
    ParamSpec s = llmc[size_t(p)];
    s.unit = unit;
    out.push_back(s);
  };
  global(GPT2Param::wte, 0);
  global(GPT2Param::wpe, 0);
  for (int l = 0; l < c.n_layer; ++l)
    for (int k = int(GPT2Param::ln1w); k <= int(GPT2Param::fcprojb); ++k) {
      ParamSpec s = llmc[size_t(k)];
      Shape one;  // drop the stacked layer dimension
      one.rank = s.shape.rank - 1;
      for (int d = 1; d < s.shape.rank; ++d) one.dims[size_t(d - 1)] = s.shape.dims[size_t(d)];
      // (append, not "h" + std::to_string(l): GCC 12 warns -Wrestrict there, a false positive)
      s.name = std::string("h").append(std::to_string(l)).append(".").append(s.name);
      s.shape = one;
      s.layer = l;
      s.unit = 1 + l;
      out.push_back(s);
    }
  global(GPT2Param::lnfw, c.n_layer + 1);
  global(GPT2Param::lnfb, c.n_layer + 1);
  return out;
}

}  // namespace strata
