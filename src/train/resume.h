// --resume: which checkpoint a run continues from, said aloud, and checked against this
// run's options (model and seed always; precision, sequence length and global batch unless
// --allow-changes; other differences are noted).
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "train/checkpoint.h"
#include "train/trainer.h"

namespace strata {

struct ResumePoint {
  std::unique_ptr<CheckpointReader> checkpoint;  // null: a fresh start
  bool complete = false;                         // the checkpoint is at or past --steps: nothing to do
};

// Collective over comm (null: one rank). `talk`: this rank prints what it does (rank 0,
// not quiet).
ResumePoint find_resume_point(const TrainOptions& opts, Communicator* comm, const nlohmann::json& model_shape,
                              const std::string& data_path, bool talk);

}  // namespace strata
