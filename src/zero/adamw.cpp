#include "zero/adamw.h"

#include "core/error.h"

namespace strata {

AdamW::AdamW(Backend& backend, int64_t num_params, AdamWConfig config, zero::StateFormat states)
    : be_(backend),
      cfg_(config),
      fmt_(states),
      m_(backend.allocate(size_t(num_params) * states.moment_bytes(), "optim:adam_m")),
      v_(backend.allocate(size_t(num_params) * states.moment_bytes(), "optim:adam_v")) {
  be_.fill_zero(m_.data(), m_.bytes(), be_.compute_stream());
  be_.fill_zero(v_.data(), v_.bytes(), be_.compute_stream());
}

int64_t AdamW::place_f32_masters(std::vector<Group>& groups, const zero::StateFormat& states) {
  int64_t at = 0;
  for (Group& g : groups) {
    const bool own = states.master != DType::f32 && states.master_of(g.decay) == DType::f32;
    g.master_at = own ? at : -1;
    if (own) at += g.count;
  }
  return at;
}

void AdamW::step(float* params, const void* grads, DType grad_dtype, void* compute_out, DType compute_dtype,
                 std::span<const Group> groups, float lr, float grad_scale, int64_t t, int32_t* nonfinite) {
  const size_t out_esz = dtype_size(compute_dtype);
  const bool master16 = fmt_.master != DType::f32;
  STRATA_CHECK(!master16 || groups.empty() || (compute_out && compute_dtype == fmt_.master),
               "AdamW: a " + std::string(dtype_name(fmt_.master)) + " master without its compute copy",
               "this is a bug in the engine: a 16-bit master is the compute shard, which it must pass");
  for (const Group& g : groups) {
    AdamWArgs a;
    a.param_out = compute_out ? static_cast<char*>(compute_out) + size_t(g.offset) * out_esz : nullptr;
    if (!master16) {
      a.param = params + g.offset;
    } else if (g.master_at >= 0) {  // an f32 master beside the bf16 ones; its copy rounds to nearest
      a.param = params + g.master_at;
    } else {  // the bf16 compute copy is the master
      STRATA_CHECK(fmt_.master_of(g.decay) == fmt_.master, "AdamW: a group without weight decay has no f32 master",
                   "this is a bug in the engine: number them with AdamW::place_f32_masters");
      a.param16 = static_cast<uint16_t*>(a.param_out), a.param_out = nullptr;
    }
    if (fmt_.moments == DType::bf16) {
      a.m16 = m_.as<uint16_t>() + g.offset, a.v16 = v_.as<uint16_t>() + g.offset;
    } else {
      a.m = m_.as<float>() + g.offset, a.v = v_.as<float>() + g.offset;
    }
    a.stochastic = fmt_.stochastic, a.seed = fmt_.seed, a.index_base = g.index;
    a.grad = static_cast<const char*>(grads) + size_t(g.offset) * dtype_size(grad_dtype);
    a.grad_dtype = grad_dtype;
    a.out_dtype = compute_dtype;
    a.n = g.count;
    a.lr = lr, a.beta1 = cfg_.beta1, a.beta2 = cfg_.beta2, a.eps = cfg_.eps;
    a.weight_decay = g.decay ? cfg_.weight_decay : 0.0f;
    a.grad_scale = grad_scale, a.t = t, a.bias_correction = cfg_.bias_correction;
    a.isa = int(cfg_.kernel.isa), a.threads = cfg_.kernel.threads, a.tile = cfg_.kernel.tile;
    be_.adamw(a, nonfinite, be_.compute_stream());
  }
}

}  // namespace strata
