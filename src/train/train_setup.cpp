#include "train/train_setup.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "io/token_file.h"
#include "model/model_factory.h"
#include "train/finetune_data.h"

namespace strata {

namespace {
// The command that turns `data` into token ids with the model's own tokenizer and chat
// template (tools/prepare_data.py), with the paths of this checkout when the binary is in
// one (build/strata) and its virtualenv when tools/setup.sh made it.
std::string prepare_command(const std::string& model, const std::string& data) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path();
  const bool here = !ec && fs::exists(root / "tools" / "prepare_data.py");
  const std::string script = here ? (root / "tools" / "prepare_data.py").string() : "tools/prepare_data.py";
  const std::string python =
      here && fs::exists(root / ".venv/bin/python") ? (root / ".venv/bin/python").string() : std::string("python3");
  const fs::path d(data);
  const std::string out = (d.parent_path() / (d.stem().string() + ".prepared.jsonl")).string();
  // A config file has no tokenizer: the command then names the directory that holds it.
  const std::string dir = fs::is_directory(model) ? model : std::string("HF_MODEL_DIR");
  return python + " " + script + " --model " + dir + " --input " + data + " --output " + out +
         ", then train with --data " + out;
}
}  // namespace

std::unique_ptr<SampleSource> make_training_data(const DataOptions& opts, uint64_t seed, const std::string& data_path,
                                                 const std::string& model_path, bool hf_dir, const ModelSpec& spec,
                                                 std::string* describe) {
  const bool jsonl = opts.data_format == "jsonl" ||
                     (opts.data_format == "auto" && std::filesystem::path(data_path).extension() == ".jsonl");
  std::unique_ptr<SampleSource> data;
  if (jsonl) {
    std::string tok = opts.tokenizer;
    if (tok.empty() && hf_dir && std::filesystem::exists(std::filesystem::path(model_path) / "tokenizer.model"))
      tok = (std::filesystem::path(model_path) / "tokenizer.model").string();
    std::unique_ptr<io::Tokenizer> tokenizer = tok.empty() ? nullptr : io::make_tokenizer(tok);
    auto ft = std::make_unique<FinetuneData>(data_path, tokenizer.get(), spec.vocab_size(), opts.seq_len, seed,
                                             prepare_command(model_path, data_path));
    if (describe) *describe = ft->describe();
    data = std::move(ft);
  } else {
    STRATA_CHECK(opts.tokenizer.empty(), "--tokenizer is for JSONL data; '" + data_path + "' is a token or text file",
                 "drop --tokenizer, or give --data FILE.jsonl");
    io::TokenFile tf = io::read_token_file(data_path, io::parse_token_format(opts.data_format));
    STRATA_CHECK(tf.max_token < spec.vocab_size(),
                 "data '" + data_path + "' holds token id " + std::to_string(tf.max_token) + " but model '" +
                     model_path + "' has a vocabulary of " + std::to_string(spec.vocab_size()),
                 "tokenize the data for this model, or pick a model with a larger vocab_size");
    data = std::make_unique<DataLoader>(std::move(tf.tokens), opts.seq_len, seed, data_path);
  }
  return data;
}

zero::ZeroOptions engine_options(const TrainOptions& opts, const ModelSpec& spec, const NodeShare& share,
                                 Communicator* comm, int host_threads) {
  zero::ZeroOptions zo;
  zo.stage = opts.zero_stage;
  zo.sub_group_size = opts.sub_group_size;
  zo.reduce_bucket_size = opts.reduce_bucket_size;
  zo.allgather_bucket_size = opts.allgather_bucket_size;
  zo.prefetch_depth = opts.prefetch_depth;
  if (opts.prefetch_bucket_size > 0) {  // units are gathered whole: count the largest layer's
    std::vector<int64_t> unit_elems(size_t(spec.n_layer() + 2), 0);
    for (const ParamSpec& ps : unit_layout(spec)) unit_elems[size_t(ps.unit)] += ps.shape.numel();
    const int64_t layer = *std::max_element(unit_elems.begin() + 1, unit_elems.end() - 1);
    // At most every other unit ahead (DeepSpeed's 5e8 on a small model asks for more).
    zo.prefetch_depth = int(std::clamp<int64_t>(opts.prefetch_bucket_size / layer, 1, spec.n_layer() + 1));
  }
  zo.param_persistence_threshold = opts.param_persistence_threshold;
  zo.max_live_params = opts.max_live_params;
  zo.hpz_partition_size = opts.hpz_partition_size;
  if (zo.hpz_partition_size == 0) {  // "node": the ranks of a node form a group
    STRATA_CHECK(!comm || comm->topology().uniform(), "--hpz-partition-size node on nodes of unequal size",
                 "launch the same number of ranks on every host (e.g. mpirun --map-by ppr:N:node)");
    zo.hpz_partition_size = comm ? comm->local_size() : 1;
  }
  zo.overlap_comm = opts.overlap_comm;
  zo.offload_optimizer = opts.offload_optimizer != zero::OffloadTier::none;
  zo.offload_param = opts.offload_param != zero::OffloadTier::none;
  zo.nvme = opts.offload_optimizer == zero::OffloadTier::nvme;
  zo.nvme_options = {share.nvme_path, opts.aio_queue_depth, opts.aio_block_size, opts.nvme_checksum};
  zo.offload_ratio = opts.offload_ratio;
  zo.speculative_step = zero::speculative_step_for(opts.speculative_step, zo.nvme, opts.grad_clip);
  zo.host_threads = std::max(1, host_threads);
  zo.states.moments = opts.optimizer_state_dtype;
  zo.states.master = opts.master_dtype;
  zo.states.stochastic = opts.state_rounding == zero::StateRounding::stochastic;
  zo.states.seed = opts.seed;
  return zo;
}

}  // namespace strata
