// A low-rank adapter checkpoint (--lora-rank) as PEFT saves an adapter:
// adapter_config.json and adapter_model.safetensors, which
// peft.PeftModel.from_pretrained(base_model, DIR) loads. Keys are the modules' full paths in
// the *ForCausalLM model ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"),
// A [r, in] and B [out, r].
#pragma once
#include <string>

#include "core/dtype.h"
#include "core/flat_source.h"
#include "model/lora.h"
#include "model/model_spec.h"
#include "train/checkpoint_manifest.h"

namespace strata {

// PEFT's key of target t's A (or B) in adapter_model.safetensors.
std::string peft_key(const ModelSpec& spec, const LoraTarget& t, bool b);

// Whether a checkpoint holds adapters rather than a whole model.
bool holds_adapters(const CheckpointManifest& m);

// Writes the adapters (`adapters`: the checkpoint's master, in its table's order) into DIR.
void export_peft(const CheckpointManifest& m, const FlatSource& adapters, const ModelSpec& spec, const std::string& dir,
                 DType dtype);

}  // namespace strata
