// The GPT-2 parameter tensors, in llm.c's order, with their shapes and optimizer roles.
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/gpt2_config.h"
#include "model/param_spec.h"

namespace strata {

enum class GPT2Param {
  wte,
  wpe,
  ln1w,
  ln1b,
  qkvw,
  qkvb,
  attprojw,
  attprojb,
  ln2w,
  ln2b,
  fcw,
  fcb,
  fcprojw,
  fcprojb,
  lnfw,
  lnfb,
  count
};

inline GPT2Param gpt2_kind(const ParamSpec& s) { return GPT2Param(s.kind); }

// llm.c's order and stacked shapes: the external format (fixtures, llm.c checkpoints).
std::vector<ParamSpec> gpt2_param_specs(const GPT2Config& c);

// The in-memory order, unit-major: unit 0 = {wte, wpe}; unit 1+l = layer l's twelve
// tensors; unit L+1 = {lnfw, lnfb}. A unit's parameters are contiguous, so ZeRO can
// gather or reduce one unit at a time.
std::vector<ParamSpec> gpt2_unit_layout(const GPT2Config& c);

}  // namespace strata
