// Low-rank adapters (LoRA, Hu et al. 2021) as PEFT applies them: a targeted linear layer
// W [out, in] keeps its weights frozen and gains A [r, in] and B [out, r], so that
// y = x·Wᵀ + (alpha / r)·dropout(x)·Aᵀ·Bᵀ. Targets are named as the Hugging Face model names
// its modules (q_proj, k_proj, …, down_proj; GPT-2's c_attn, c_proj, c_fc; Phi-3's fused
// qkv_proj and gate_up_proj), and "all-linear" takes every linear layer of the decoder layers,
// the output head excepted, as PEFT's "all-linear" does.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/param_spec.h"

namespace strata {

struct ModelSpec;

// How A starts (B starts at zero, so the adapted model starts as the base): PEFT's default
// (init_lora_weights=True: Kaiming-uniform with a = √5, bounds ±1/√in) or "gaussian"
// (normal with standard deviation 1/r).
enum class LoraInit { kaiming, gaussian };

struct LoraConfig {
  int rank = 0;  // 0: no adapters
  double alpha = 8;
  double dropout = 0;
  std::vector<std::string> targets;  // module names, or {"all-linear"}; empty: the family's PEFT default
  LoraInit init = LoraInit::kaiming;
  bool enabled() const { return rank > 0; }
  double scaling() const { return alpha / double(rank); }
};

// One adapted linear layer of one decoder layer: the base tensors it covers (consecutive
// specs of the unit layout under one Hugging Face module, as Phi-3's qkv_proj covers q, k and
// v) and where its rows sit in the fused matmul the model runs.
struct LoraTarget {
  std::string module;   // "q_proj"
  std::string hf_path;  // "model.layers.3.self_attn.q_proj" (PEFT's key, without base_model.model.)
  int layer = 0;
  int first_spec = 0;  // the unit layout's index of the first base tensor it covers
  int specs = 1;       // how many consecutive base tensors
  int64_t in = 0, out = 0;
};

// The targets of every decoder layer, layer by layer in layout order. Throws naming the
// module names the family has when a target matches none.
std::vector<LoraTarget> lora_targets(const ModelSpec& spec, const LoraConfig& lora);

// The module names a family's decoder layers have (for messages and --help).
std::vector<std::string> lora_module_names(const ModelSpec& spec);

// The adapters' unit-major table: per target, A [r, in] then B [out, r], in the target's
// layer's unit (1 + layer); `decay`: whether --weight-decay applies (a run's adapters take it,
// as torch.optim.AdamW over PEFT's trainable parameters and Hugging Face's Trainer do).
std::vector<ParamSpec> lora_layout(const std::vector<LoraTarget>& targets, int rank, bool decay);

}  // namespace strata
