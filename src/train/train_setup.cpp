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

bool is_jsonl(const std::string& format, const std::string& path) {
  return format == "jsonl" || (format == "auto" && std::filesystem::path(path).extension() == ".jsonl");
}

// JSONL records, tokenized by --tokenizer or the tokenizer.model beside a model directory.
std::shared_ptr<const FinetuneRecords> read_records(const DataOptions& opts, const std::string& path,
                                                    const std::string& model_path, bool hf_dir, const ModelSpec& spec) {
  std::string tok = opts.tokenizer;
  if (tok.empty() && hf_dir && std::filesystem::exists(std::filesystem::path(model_path) / "tokenizer.model"))
    tok = (std::filesystem::path(model_path) / "tokenizer.model").string();
  std::unique_ptr<io::Tokenizer> tokenizer = tok.empty() ? nullptr : io::make_tokenizer(tok);
  return std::make_shared<const FinetuneRecords>(path, tokenizer.get(), spec.vocab_size(), opts.seq_len,
                                                 prepare_command(model_path, path));
}

// A token or text file's tokens, checked against the model's vocabulary.
std::shared_ptr<const std::vector<int32_t>> read_tokens(const DataOptions& opts, const std::string& format,
                                                        const std::string& path, const std::string& model_path,
                                                        const ModelSpec& spec) {
  STRATA_CHECK(opts.tokenizer.empty(), "--tokenizer is for JSONL data; '" + path + "' is a token or text file",
               "drop --tokenizer, or give --data FILE.jsonl");
  io::TokenFile tf = io::read_token_file(path, io::parse_token_format(format));
  STRATA_CHECK(tf.max_token < spec.vocab_size(),
               "data '" + path + "' holds token id " + std::to_string(tf.max_token) + " but model '" + model_path +
                   "' has a vocabulary of " + std::to_string(spec.vocab_size()),
               "tokenize the data for this model, or pick a model with a larger vocab_size");
  return std::make_shared<const std::vector<int32_t>>(std::move(tf.tokens));
}

}  // namespace

RunData make_run_data(const TrainOptions& opts, const std::string& data_path, const std::string& model_path,
                      bool hf_dir, const ModelSpec& spec) {
  RunData d;
  const uint64_t seed = opts.seed;
  const double frac = opts.eval_fraction;
  if (is_jsonl(opts.data_format, data_path)) {
    auto recs = read_records(opts, data_path, model_path, hf_dir, spec);
    std::vector<int64_t> train, held;
    if (frac > 0) {  // the held-out records, and every other one for training
      held = FinetuneData::held_out(recs->size(), frac, seed, data_path);
      for (int64_t r = 0, k = 0; r < recs->size(); ++r)
        if (k < int64_t(held.size()) && held[size_t(k)] == r)
          ++k;
        else
          train.push_back(r);
    }
    auto ft = std::make_unique<FinetuneData>(recs, std::move(train), seed, opts.pack, false);
    d.train_line = ft->describe();
    d.train = std::move(ft);
    if (frac > 0) {
      auto ev = std::make_unique<FinetuneData>(recs, std::move(held), seed, opts.pack, true);
      d.eval_line = ev->describe() + ", held out of --data";
      d.eval = std::move(ev);
    }
  } else {
    auto tokens = read_tokens(opts, opts.data_format, data_path, model_path, spec);
    const int64_t n = int64_t(tokens->size());
    const int64_t split = frac > 0 ? DataLoader::eval_split(n, frac, opts.seq_len, data_path) : n;
    d.train = std::make_unique<DataLoader>(tokens, 0, split, opts.seq_len, seed, false, data_path);
    if (frac > 0) {
      d.eval = std::make_unique<DataLoader>(tokens, split, n, opts.seq_len, seed, true, data_path);
      d.eval_line =
          std::to_string(n - split) + " tokens (the last of --data), " + std::to_string(d.eval->rows()) + " windows";
    }
  }
  if (!opts.eval_data.empty()) {  // a file of its own, in any --data format
    const std::string path = resolve_resource(opts.eval_data);
    // --data-format names --data's format; the validation file's own goes by its extension,
    // unless a token format was forced for both.
    const std::string format = opts.data_format == "jsonl" ? "auto" : opts.data_format;
    if (is_jsonl(format, path)) {
      auto ev = std::make_unique<FinetuneData>(read_records(opts, path, model_path, hf_dir, spec),
                                               std::vector<int64_t>{}, seed, opts.pack, true);
      d.eval_line = ev->describe();
      d.eval = std::move(ev);
    } else {
      auto tokens = read_tokens(opts, format, path, model_path, spec);
      d.eval = std::make_unique<DataLoader>(tokens, 0, -1, opts.seq_len, seed, true, path);
      d.eval_line = std::to_string(tokens->size()) + " tokens, " + std::to_string(d.eval->rows()) + " windows";
    }
    d.eval_line += " from '" + path + "'";
  }
  return d;
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
  // With adapters, --offload-param places the frozen weights (ZeroEngine::attach_frozen); the
  // adapters' own parameters stay on the device.
  zo.offload_param = opts.offload_param != zero::OffloadTier::none && !opts.lora();
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
