// What train() builds before its step loop, each from the options alone: the training data
// and the ZeRO engine's options (train() is this setup, a step loop and reporters).
#pragma once
#include <memory>
#include <string>

#include "model/model_spec.h"
#include "train/data_loader.h"
#include "train/node_share.h"
#include "train/trainer.h"
#include "zero/zero_engine.h"

namespace strata {

// The samples: JSONL records (tokenized by --tokenizer, or the tokenizer.model beside a
// Hugging Face model directory) or a token/text file, ordered by --seed; and the validation
// set: --eval-data, or the part of --data that --eval-fraction holds out (never trained on).
struct RunData {
  std::unique_ptr<SampleSource> train, eval;  // eval: null without validation
  std::string train_line, eval_line;          // for the start-up lines (train_line: JSONL only)
};
RunData make_run_data(const TrainOptions& opts, const std::string& data_path, const std::string& model_path,
                      bool hf_dir, const ModelSpec& spec);

// The engine's options from the run's: stage, buckets, prefetch (from --prefetch-bucket-size
// in units of the largest layer), persistence, hpZ ("node" = the ranks of a node), overlap
// and the offload tiers on this rank's share of its node.
zero::ZeroOptions engine_options(const TrainOptions& opts, const ModelSpec& spec, const NodeShare& share,
                                 Communicator* comm, int host_threads);

}  // namespace strata
