// Sharded, atomic checkpoints.
//
// OUT/checkpoints/step-00000012/
//   manifest.json                          trainer state + every file's size and xxHash64
//   rank-00000-of-00002.safetensors        what rank 0 owns: tensors "master.<flat>",
//   rank-00001-of-00002.safetensors          "m.<flat>", "v.<flat>" (model-flat ranges, each
//                                            state in its run's dtype: f32, or bf16 with
//                                            --master-dtype / --optimizer-state-dtype bf16)
//
// A save first checks that the whole checkpoint fits in the free space, then writes into
// OUT/checkpoints/.step-00000012.HOST-PID.tmp/ (named by rank 0's process): each rank its
// file (fsync), then rank 0 the manifest (temp name, fsync, rename), then the directory is
// renamed to its final name and the parent fsynced. Only a directory with a manifest is a
// checkpoint, so a job killed at any point leaves the previous checkpoint as the newest
// complete one. A save that fails removes its temporary directory; one left by a killed run
// is removed by a later save once its creator is provably gone (see RunLock). Old
// checkpoints beyond --keep-checkpoints are pruned manifest first, after the new one is
// complete.
//
// Partitions are saved by model-flat position, not by rank layout: a reader of any world
// size or ZeRO stage takes the ranges it owns from whichever files hold them (resharding in
// place, no offline tool).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/flat_source.h"
#include "io/safetensors.h"
#include "train/checkpoint_manifest.h"

namespace strata {

class Communicator;

// The newest complete checkpoint under out/checkpoints ("" if none).
std::string newest_checkpoint(const std::string& out);
std::string checkpoint_dir_name(int64_t step);

// Collective over comm (null: one rank). `write_rank_file` writes this rank's partition
// into the given path and returns its checksum and size. Rank 0 completes the manifest,
// renames and prunes. Throws (on every rank) if any rank failed; the previous checkpoint
// stays the newest complete one.
struct SavedRankFile {
  uint64_t xxh64 = 0, bytes = 0;
};
// rank_bytes: the size this rank's file will have (at least), for the free-space check made
// before anything is written ("needs X, has Y at PATH"). A failed save removes what it wrote.
void save_checkpoint(const std::string& out, CheckpointManifest manifest, Communicator* comm, int keep,
                     uint64_t rank_bytes, const std::function<SavedRankFile(const std::string& path)>& write_rank_file);
// "the last complete checkpoint is OUT/checkpoints/step-N", or that there is none (hints).
std::string describe_newest_checkpoint(const std::string& out);

// A complete checkpoint opened for reading: the manifest, its files verified against their
// checksums (each rank verifies its share; the result is agreed), and one source per state.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& dir, Communicator* comm);
  ~CheckpointReader();
  const CheckpointManifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }
  const FlatSource& source(int kind) const;  // 0 master, 1 m, 2 v

 private:
  class Source;
  std::string dir_;
  CheckpointManifest manifest_;
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::vector<std::unique_ptr<Source>> sources_;
};

}  // namespace strata
