#include "model/llama_params.h"

namespace strata {

namespace {
using P = LlamaParam;
struct Named {
  LlamaParam kind;
  const char* name;
};
// A layer's tensors in unit order (wq|wk|wv, bq|bk|bv, q_norm|k_norm and w_gate|w_up each
// adjacent, as the fused ops read them); `used` leaves out what the config does not have.
constexpr Named kLayer[] = {{P::attn_norm, "attn_norm"},
                            {P::wq, "wq"},
                            {P::wk, "wk"},
                            {P::wv, "wv"},
                            {P::bq, "bq"},
                            {P::bk, "bk"},
                            {P::bv, "bv"},
                            {P::q_norm, "q_norm"},
                            {P::k_norm, "k_norm"},
                            {P::wo, "wo"},
                            {P::bo, "bo"},
                            {P::post_attn_norm, "post_attn_norm"},
                            {P::mlp_norm, "mlp_norm"},
                            {P::w_gate, "w_gate"},
                            {P::w_up, "w_up"},
                            {P::w_down, "w_down"},
                            {P::post_mlp_norm, "post_mlp_norm"}};

bool used(const LlamaConfig& c, LlamaParam k) {
  switch (k) {
    case P::bq:
    case P::bk:
    case P::bv:
      return c.qkv_bias;
    case P::q_norm:
    case P::k_norm:
      return c.qk_norm;
    case P::bo:
      return c.o_bias;
    case P::attn_norm:
    case P::mlp_norm:
      return c.norms != NormPlacement::post;
    case P::post_attn_norm:
    case P::post_mlp_norm:
      return c.norms != NormPlacement::pre;
    case P::lm_head:
      return !c.tied;
    default:
      return true;
  }
}

}  // namespace

std::vector<ParamSpec> llama_unit_layout(const LlamaConfig& c) {
  const int64_t C = c.n_embd, d = c.head_dim(), I = c.intermediate, Vp = c.padded_vocab_size;
  const int64_t q = c.q_dim(), kv = int64_t(c.n_kv_head) * d;
  std::vector<ParamSpec> out;
  auto add = [&](std::string name, Shape shape, bool decay, LlamaParam k, int layer, int unit) {
    out.push_back({std::move(name), shape, decay, int(k), layer, unit});
  };
  add("embed", {Vp, C}, true, P::embed, 0, 0);
  for (int l = 0; l < c.n_layer; ++l) {
    // (append, not "h" + std::to_string(l): GCC 12 warns -Wrestrict there, a false positive)
    const std::string h = std::string("h").append(std::to_string(l)).append(".");
    const int64_t qn = c.qk_norm_whole ? q : d, kn = c.qk_norm_whole ? kv : d;  // the q and k norms' weights
    const Shape shapes[] = {{C},    {q, C}, {kv, C}, {kv, C}, {q},    {kv},   {kv},   {qn}, {kn},
                            {C, q}, {C},    {C},     {C},     {I, C}, {I, C}, {C, I}, {C}};
    static_assert(sizeof(shapes) / sizeof(shapes[0]) == std::size(kLayer));
    for (size_t i = 0; i < std::size(kLayer); ++i)
      if (used(c, kLayer[i].kind)) add(h + kLayer[i].name, shapes[i], shapes[i].rank == 2, kLayer[i].kind, l, 1 + l);
  }
  add("norm", {C}, false, P::norm, 0, c.n_layer + 1);
  if (!c.tied) add("lm_head", {Vp, C}, true, P::lm_head, 0, c.n_layer + 1);
  return out;
}

LlamaParam llama_kind(const ParamSpec& s) { return LlamaParam(s.kind); }

}  // namespace strata
