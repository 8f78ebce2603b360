// A model in Strata's flat layout written as Hugging Face saves it: safetensors with
// Hugging Face's tensor names and layouts, config.json, and the source model's tokenizer
// files.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/hf_weights.h"
#include "model/model_spec.h"

namespace strata {

// save_pretrained's default shard size (5 GB, decimal).
constexpr size_t kDefaultMaxShardBytes = size_t(5) * 1000 * 1000 * 1000;

// Writes `weights` as Hugging Face safetensors, one tensor in memory at a time. `out` ending
// in .safetensors is that one file. Otherwise `out` is a directory with config.json and, as
// save_pretrained writes them, model.safetensors when the tensors fit in `max_shard_bytes`,
// else model-0000k-of-0000n.safetensors shards of at most that many bytes (a tensor larger
// than that alone in its shard) and model.safetensors.index.json. Every file is written under
// a temporary name and renamed when all are complete: a failed export (a full disk) leaves
// the directory's earlier export as it was. Then an earlier export's weight files that this
// one did not replace are removed.
void export_hf(const ModelSpec& spec, const FlatSource& weights, const std::string& out, DType dtype,
               size_t max_shard_bytes = kDefaultMaxShardBytes);

// After export_hf into directory `out`: the source model directory's tokenizer files and
// generation_config.json are copied in, and its special token ids (bos, eos, pad) set in
// out/config.json, so the export loads and generates as the model it came from. Returns
// what it did, one line per file; nothing when `source` no longer exists (said in the line).
std::vector<std::string> carry_model_files(const std::string& source, const std::string& out);

}  // namespace strata
