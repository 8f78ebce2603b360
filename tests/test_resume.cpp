// Checkpoints under real mpirun (1-4 ranks): a run interrupted after a checkpoint and
// resumed with --resume continues bitwise identically (every later loss and the final
// parameters), in every stage and tier; a checkpoint written by one rank is resumed by N
// ranks at another ZeRO stage and the other way round (resharding in place), matching the
// uninterrupted run within the ZeRO equivalence tolerance; corrupted, truncated or mismatched checkpoints
// are refused with a message naming what is wrong; old checkpoints are pruned.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "comm/mpi_comm.h"
#include "mpi_test_main.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/planner.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
MpiComm* world = nullptr;

struct Interrupted : Error {
  Interrupted() : Error("interrupted by the test", "") {}
};

// One directory name for all ranks (rank 0's pid), so they share the checkpoints.
std::string shared_dir(const std::string& tag) {
  int64_t pid = getpid();
  world->broadcast(std::span<int64_t>(&pid, 1), 0);
  return (fs::temp_directory_path() / ("strata_resume_" + tag + "_" + std::to_string(pid))).string();
}

TrainOptions base(const std::string& out) {
  TrainOptions o;
  o.model = test::source_path("configs/gpt2-tiny-bytes.json");
  o.data = test::source_path("data/default.txt");
  o.steps = 8;
  o.seq_len = 16;
  o.micro_batch = 2;
  o.warmup = 2;
  o.lr = 1e-3;
  o.quiet = true;
  o.out = out;
  o.log_every = 1;
  return o;
}

// This test's runs: on every rank (each training its slice of the global batch) or on this
// one alone, keeping the final parameters to compare; a run is killed before step
// `interrupt_at` (0-based; -1: never).
TrainContext context(Communicator* comm, int64_t interrupt_at) {
  TrainContext c;
  c.comm = comm, c.keep_final_params = true;
  if (interrupt_at >= 0)
    c.on_step_begin = [interrupt_at](int64_t step) {
      if (step == interrupt_at) throw Interrupted();
    };
  return c;
}
TrainResult train_ranks(const TrainOptions& o, int64_t interrupt_at = -1) {
  return train(o, context(world, interrupt_at));
}
TrainResult train_alone(const TrainOptions& o, int64_t interrupt_at = -1) {
  return train(o, context(nullptr, interrupt_at));
}

// Trains to the end, interrupted once at `stop` (after the checkpoint of step `stop`) and
// resumed; returns the resumed run's result.
TrainResult interrupted_and_resumed(TrainOptions o, int64_t stop) {
  o.save_every = stop;
  EXPECT_THROW(train_ranks(o, stop + 1), Interrupted);  // killed one step after the checkpoint
  o.resume = true;
  return train_ranks(o);
}

void expect_bitwise(const TrainResult& a, const TrainResult& b, int64_t from, const std::string& what) {
  ASSERT_EQ(b.resumed_from, from) << what;
  ASSERT_EQ(a.steps.size(), size_t(b.resumed_from) + b.steps.size()) << what;
  for (size_t i = 0; i < b.steps.size(); ++i)
    EXPECT_EQ(b.steps[i].loss, a.steps[size_t(from) + i].loss) << what << ", step " << from + int64_t(i) + 1;
  ASSERT_EQ(a.final_params.size(), b.final_params.size());
  EXPECT_EQ(std::memcmp(a.final_params.data(), b.final_params.data(), a.final_params.size() * 4), 0)
      << what << ": final parameters differ";
}

struct Config {
  const char* name;
  int stage;
  DType precision;
  int accum;
  std::string optimizer = "none", param = "none";
  std::string model = "configs/gpt2-tiny-bytes.json";
  std::string data = "data/default.txt";
  std::string states = "f32";  // m, v (and at stages 1-3 with a bf16 compute dtype, the master) in this dtype
};

TEST(Resume, IsBitwiseIdenticalInEveryStageAndTier) {
  const Config cases[] = {
      {"stage 0 f32", 0, DType::f32, 1},
      {"stage 1 bf16", 1, DType::bf16, 1},
      {"stage 2 f32 accum 2", 2, DType::f32, 2},
      {"stage 3 bf16", 3, DType::bf16, 1},
      {"stage 2 f16 (loss scale)", 2, DType::f16, 1},
      {"stage 3 f32, optimizer and parameters in host RAM", 3, DType::f32, 1, "cpu", "cpu"},
      {"stage 2 bf16, optimizer on NVMe", 2, DType::bf16, 1, "nvme"},
      {"Llama, stage 3 bf16", 3, DType::bf16, 1, "none", "none", "configs/llama-tiny-bytes.json"},
      {"Llama, stage 1 f32, optimizer in host RAM", 1, DType::f32, 1, "cpu", "none", "configs/llama-tiny-bytes.json"},
      {"Llama, stage 2 f32 accum 2, masked JSONL records", 2, DType::f32, 2, "none", "none",
       "configs/llama-tiny-bytes.json", "data/sft-tiny.jsonl"},
      {"stage 2 bf16, bf16 master, m and v in host RAM", 2, DType::bf16, 2, "cpu", "none",
       "configs/gpt2-tiny-bytes.json", "data/default.txt", "bf16"},
      {"Llama, stage 3 bf16, bf16 master, m and v and parameters on NVMe", 3, DType::bf16, 1, "nvme", "nvme",
       "configs/llama-tiny-bytes.json", "data/default.txt", "bf16"},
      {"stage 1 f32, bf16 m and v in host RAM", 1, DType::f32, 1, "cpu", "none", "configs/gpt2-tiny-bytes.json",
       "data/default.txt", "bf16"},
      {"stage 3 bf16, bf16 master, m and v on the device", 3, DType::bf16, 1, "none", "none",
       "configs/gpt2-tiny-bytes.json", "data/default.txt", "bf16"},
      {"Llama, stage 1 bf16, bf16 master, m and v on the device", 1, DType::bf16, 2, "none", "none",
       "configs/llama-tiny-bytes.json", "data/default.txt", "bf16"},
  };
  for (const Config& c : cases) {
    const std::string dir = shared_dir(std::string("bitwise") + std::to_string(c.stage));
    TrainOptions o = base(dir);
    o.model = test::source_path(c.model);
    o.data = test::source_path(c.data);
    if (c.data.ends_with(".jsonl")) o.tokenizer = "bytes", o.seq_len = 32;
    o.zero_stage = c.stage, o.precision = c.precision, o.grad_accum = c.accum;
    o.sub_group_size = 700, o.reduce_bucket_size = 1500, o.allgather_bucket_size = 2500;
    o.param_persistence_threshold = 300;
    test::set_option(o, "offload-optimizer", c.optimizer);
    test::set_option(o, "offload-param", c.param);
    test::set_option(o, "optimizer-state-dtype", c.states);
    if (c.precision != DType::f32 && c.stage > 0) test::set_option(o, "master-dtype", c.states);  // not at stage 0
    if (c.precision == DType::f16) o.initial_scale_power = 30, o.loss_scale_window = 3;  // overflows, then grows
    if (c.optimizer == "nvme") {
      o.nvme_path = dir + "_nvme_r" + std::to_string(world->rank());
      fs::create_directories(o.nvme_path);
      o.aio_block_size = 8192, o.pin_buffer_size = 16384;
      o.sub_group_size = 3000, o.reduce_bucket_size = 20000, o.allgather_bucket_size = 20000;
    }
    if (c.optimizer != "none") o.pin_buffer_count = 3, o.pin_buffer_size = std::max<size_t>(o.pin_buffer_size, 4096);
    TrainOptions ref = o;
    ref.out = dir + "_ref";
    const TrainResult a = train_ranks(ref);
    const TrainResult b = interrupted_and_resumed(o, 4);
    expect_bitwise(a, b, 4, std::string(c.name) + ", " + std::to_string(world->size()) + " ranks");
    if (c.precision == DType::f16) {
      bool skipped = false;
      for (const StepRecord& s : a.steps) skipped |= s.skipped;
      EXPECT_TRUE(skipped) << "the fp16 case should exercise the loss scaler's state";
    }
    world->barrier();
    if (world->rank() == 0) fs::remove_all(dir), fs::remove_all(dir + "_ref");
    if (!o.nvme_path.empty()) fs::remove_all(o.nvme_path);
  }
}

// One rank writes (stage 0, the N ranks' global batch as accumulation), N ranks resume at
// stage `to`; and the other way round.
TEST(Resume, ReshardsAcrossWorldSizeAndStage) {
  const int N = world->size();
  for (int to : {1, 2, 3}) {
    const std::string dir = shared_dir("reshard" + std::to_string(to));
    TrainOptions dist = base(dir);
    dist.micro_batch = 1, dist.zero_stage = to;
    dist.sub_group_size = 700, dist.param_persistence_threshold = 300;
    TrainOptions ref = dist;
    ref.out = dir + "_ref";
    const TrainResult a = train_ranks(ref);  // uninterrupted, N ranks
    TrainOptions single = base(dir);
    single.micro_batch = 1, single.grad_accum = N, single.save_every = 4, single.steps = 8;
    if (world->rank() == 0) {
      EXPECT_THROW(train_alone(single, 5), Interrupted);
    }
    world->barrier();
    dist.resume = true;
    const TrainResult b = train_ranks(dist);  // 1 rank, stage 0 -> N ranks, stage `to`
    ASSERT_EQ(b.resumed_from, 4);
    for (size_t i = 0; i < b.steps.size(); ++i)
      EXPECT_NEAR(b.steps[i].loss, a.steps[4 + i].loss, 1e-5)
          << "1 -> " << N << " ranks, stage " << to << ", step " << 5 + i;
    test::expect_close(b.final_params.data(), a.final_params.data(), a.final_params.size(), 5e-5, 1e-4,
                       "final parameters after resharding to stage " + std::to_string(to));

    // N ranks at stage `to` write, one rank (stage 0) resumes.
    const std::string back = shared_dir("reshard_back" + std::to_string(to));
    TrainOptions w = dist;
    w.out = back, w.resume = false;
    w.save_every = 4;
    EXPECT_THROW(train_ranks(w, 5), Interrupted);
    world->barrier();
    if (world->rank() == 0) {
      TrainOptions one = base(back);
      one.micro_batch = 1, one.grad_accum = N, one.resume = true;
      const TrainResult c = train_alone(one);
      ASSERT_EQ(c.resumed_from, 4);
      for (size_t i = 0; i < c.steps.size(); ++i)
        EXPECT_NEAR(c.steps[i].loss, a.steps[4 + i].loss, 1e-5)
            << N << " ranks, stage " << to << " -> 1 rank, step " << 5 + i;
      test::expect_close(c.final_params.data(), a.final_params.data(), a.final_params.size(), 5e-5, 1e-4,
                         "final parameters after resharding from stage " + std::to_string(to));
      fs::remove_all(dir), fs::remove_all(back), fs::remove_all(dir + "_ref");
    }
    world->barrier();
  }
}

// What a run on `comm` (null: this rank alone) throws, or "(no error)".
std::string message_of(const TrainOptions& o, Communicator* comm) {
  try {
    TrainContext c;
    c.comm = comm;
    train(o, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Whether model-flat offset `at` belongs to a parameter that AdamW decays (with a bf16
// master, the others keep an f32 master).
bool decays(const std::string& model, int64_t at) {
  for (const zero::ParamSpan& q : param_table(ModelSpec::load(model)).first)
    if (at < q.offset + q.count) return q.weight_decay;
  return true;
}

// A checkpoint holds each state in its run's dtype (a bf16 state widens exactly on
// reading; a bf16 master's parameters without weight decay are f32 as in the run), so a run
// resumes with other state dtypes, at another stage, once --allow-changes says so: the first
// resumed step's loss is the writer's own next loss bit for bit (a bf16 master and the bf16
// compute copy are both the f32 master rounded to nearest, and a widened bf16 master narrows
// back to itself), and the run goes on to the writer's losses within the 16-bit states'
// resolution.
TEST(Resume, ContinuesWithOtherOptimizerStateDtypes) {
  for (const auto& [from, to] : {std::pair{"f32", "bf16"}, std::pair{"bf16", "f32"}}) {
    const std::string dir = shared_dir(std::string("dtypes_") + from);
    TrainOptions w = base(dir);
    w.precision = DType::bf16, w.zero_stage = 2, w.offload_optimizer = zero::OffloadTier::cpu;
    w.sub_group_size = 700, w.reduce_bucket_size = 1500, w.allgather_bucket_size = 2500;
    w.pin_buffer_count = 3, w.pin_buffer_size = 4096;
    w.optimizer_state_dtype = w.master_dtype = parse_dtype(from);
    w.device_threads = 1;  // offloaded or not, and under mpirun or not: the loss's sums alike
    TrainOptions ref = w;
    ref.out = dir + "_ref";
    const TrainResult a = train_ranks(ref);
    w.save_every = 4;
    EXPECT_THROW(train_ranks(w, 5), Interrupted);
    const std::string what = std::string(from) + " states -> " + to + ", " + std::to_string(world->size()) + " ranks";
    {  // The rank files hold master, m and v in the writer's dtype: 12 or 6 bytes per
       // parameter, 8 for a bf16 master's norm gains and biases (an f32 master, 4 B).
      const CheckpointReader ck((fs::path(dir) / "checkpoints" / checkpoint_dir_name(4)).string(), world);
      const DType want = std::string(from) == "bf16" ? DType::bf16 : DType::f32;
      uint64_t state_bytes = 0, kept_f32 = 0;
      for (const CheckpointFile& f : ck.manifest().files) {
        const io::SafetensorsFile file((fs::path(ck.dir()) / f.name).string());
        for (const io::SafeTensor& t : file.header().tensors) {
          const bool f32_master =
              want == DType::bf16 && t.name.starts_with("master.") && !decays(w.model, std::stoll(t.name.substr(7)));
          EXPECT_EQ(t.dtype, f32_master ? DType::f32 : want) << what << ": " << f.name << " " << t.name;
          state_bytes += uint64_t(t.numel()) * dtype_size(t.dtype);
          kept_f32 += f32_master ? uint64_t(t.numel()) : 0;
        }
      }
      EXPECT_EQ(kept_f32 > 0, want == DType::bf16) << what << ": the norm gains and biases";
      EXPECT_EQ(state_bytes, uint64_t(ck.manifest().num_params) * 3 * dtype_size(want) + 2 * kept_f32) << what;
    }
    TrainOptions r = w;
    r.resume = true;
    // Into bf16 states on the device (a bf16 master is the compute shard there), out of them
    // with the parameters in host RAM.
    r.zero_stage = 3, r.param_persistence_threshold = 300;
    if (std::string(to) == "bf16")
      r.offload_optimizer = zero::OffloadTier::none;
    else
      r.offload_param = zero::OffloadTier::cpu;
    r.optimizer_state_dtype = r.master_dtype = parse_dtype(to);
    const std::string refused = message_of(r, world);  // the dtypes change what the run computes
    EXPECT_NE(refused.find("--optimizer-state-dtype " + std::string(to) + " (checkpoint: " + from + ")"),
              std::string::npos)
        << refused;
    EXPECT_NE(refused.find("--master-dtype"), std::string::npos) << refused;
    EXPECT_NE(refused.find("--allow-changes"), std::string::npos) << refused;
    {  // The rounding is compared only where a state is 16-bit (on a copy of the checkpoints).
      TrainOptions other = w;
      other.resume = true, other.state_rounding = zero::StateRounding::nearest;
      other.out = dir + "_rounding";
      if (world->rank() == 0) fs::copy(dir, other.out, fs::copy_options::recursive);
      world->barrier();
      const std::string msg = message_of(other, world);
      if (std::string(from) == "bf16")
        EXPECT_NE(msg.find("--state-rounding nearest (checkpoint: stochastic)"), std::string::npos) << msg;
      else
        EXPECT_EQ(msg, "(no error)") << "f32 states do not round";
      world->barrier();
      if (world->rank() == 0) fs::remove_all(other.out);
    }
    r.allow_changes = true;
    const TrainResult b = train_ranks(r);
    ASSERT_EQ(b.resumed_from, 4) << what;
    ASSERT_EQ(b.steps.size(), 4u) << what;
    EXPECT_EQ(b.steps[0].loss, a.steps[4].loss) << what << ": the first resumed step";
    for (size_t i = 1; i < b.steps.size(); ++i)
      EXPECT_NEAR(b.steps[i].loss, a.steps[4 + i].loss, 5e-3) << what << ", step " << 5 + i;
    world->barrier();
    if (world->rank() == 0) fs::remove_all(dir), fs::remove_all(dir + "_ref");
  }
}

WORLD_SIZES(1)
TEST(Resume, BadCheckpointsAreRefusedWithTheReason) {
  if (world->size() > 1) GTEST_SKIP() << "runs on one rank";
  const std::string dir = shared_dir("bad");
  TrainOptions o = base(dir);
  o.steps = 4, o.save_every = 2;
  train_alone(o);
  const fs::path ck = fs::path(dir) / "checkpoints" / checkpoint_dir_name(4);
  const fs::path part = ck / "rank-00000-of-00001.safetensors";
  ASSERT_TRUE(fs::exists(part));
  TrainOptions r = o;
  r.steps = 6, r.resume = true;
  const std::string saved = dir + "_saved";
  fs::copy(ck, saved, fs::copy_options::recursive);
  auto restore = [&] {
    fs::remove_all(ck);
    fs::copy(saved, ck, fs::copy_options::recursive);
  };
  {  // one flipped byte
    std::fstream f(part, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(5000);
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(5000);
    f.write(&c, 1);
  }
  EXPECT_NE(message_of(r, nullptr).find("checksum"), std::string::npos) << message_of(r, nullptr);
  restore();
  fs::resize_file(part, fs::file_size(part) - 100);
  EXPECT_NE(message_of(r, nullptr).find("truncated"), std::string::npos) << message_of(r, nullptr);
  restore();
  std::ofstream(ck / "manifest.json") << "{\"format\": \"strata-checkpoint\", \"version\": 1, \"step\": \"four\"}";
  EXPECT_NE(message_of(r, nullptr).find("'step' is missing or has the wrong type"), std::string::npos)
      << message_of(r, nullptr);
  restore();
  TrainOptions other = r;
  other.model = test::source_path("configs/gpt2-tiny.json");
  EXPECT_NE(message_of(other, nullptr).find("was written for model"), std::string::npos) << message_of(other, nullptr);
  TrainOptions seed = r;
  seed.seed = 7;
  EXPECT_NE(message_of(seed, nullptr).find("--seed"), std::string::npos) << message_of(seed, nullptr);
  // An interrupted save (no manifest) is not a checkpoint: the previous one is used.
  fs::remove(ck / "manifest.json");
  const TrainResult ok = train_alone(r);
  EXPECT_EQ(ok.resumed_from, 2);
  fs::remove_all(dir), fs::remove_all(saved);
}

WORLD_SIZES(1)
TEST(Resume, KeepsOnlyTheNewestCheckpoints) {
  if (world->size() > 1) GTEST_SKIP() << "runs on one rank";
  const std::string dir = shared_dir("keep");
  TrainOptions o = base(dir);
  o.steps = 7, o.save_every = 2, o.keep_checkpoints = 2;
  train_alone(o);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(dir) / "checkpoints")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{checkpoint_dir_name(6), checkpoint_dir_name(7)}));
  EXPECT_EQ(newest_checkpoint(dir), (fs::path(dir) / "checkpoints" / checkpoint_dir_name(7)).string());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::test::run_mpi_tests(argc, argv, strata::world, 120); }
