// Low-rank adapters under the ZeRO engine, on real ranks: the adapters train the same at every
// stage, with their optimizer on the device, in host RAM or on NVMe, and on every tier of the
// frozen weights (whole on every rank at stages 0-2; partitioned at stage 3, on the device, in
// host RAM or on NVMe), and strata plan's LoRA rows are what such runs allocate and move.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "comm/mpi_comm.h"
#include "mpi_test_main.h"
#include "plan_check.h"
#include "test_util.h"
#include "train/planner.h"
#include "train/trainer.h"

namespace strata {
namespace {

MpiComm* world = nullptr;
constexpr int kGlobalBatch = 12;  // divisible by 1 to 4 ranks

std::string scratch_dir(const std::string& tag) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() /
      ("strata_lora_" + tag + "_" + std::to_string(getpid()) + "_r" + std::to_string(world->rank()));
  std::filesystem::create_directories(p);
  return p.string();
}

// Adapters of rank 4 on every linear layer of a tiny Llama (GQA, 2 layers); each rank trains
// its slice of the global batch. Small sub-groups and no persistence, so that stage 3
// partitions and gathers every frozen tensor.
TrainOptions lora_options(int ranks, DType precision) {
  TrainOptions o;
  o.model = test::source_path("configs/llama-tiny-bytes.json");
  o.data = test::source_path("data/default.txt");
  o.steps = 4, o.seq_len = 16, o.warmup = 0, o.lr = 1e-2, o.quiet = true;
  o.precision = precision;
  o.micro_batch = kGlobalBatch / ranks;
  o.lora_rank = 4, o.lora_alpha = 8, o.lora_targets = "all-linear";
  o.sub_group_size = 1000, o.param_persistence_threshold = 0;
  o.reduce_bucket_size = 4096, o.allgather_bucket_size = 8192;
  o.threads = 1, o.device_threads = 1, o.host_threads = 1;
  o.pin_buffer_count = 3, o.pin_buffer_size = 16384;
  o.out = scratch_dir("out");
  return o;
}

// Stage, the adapters' optimizer tier and the frozen weights' tier, as the plan names them.
void set_offload(TrainOptions& o, int stage, const std::string& off, const std::string& nvme_dir) {
  o.zero_stage = stage;
  test::set_option(o, "offload-optimizer", off.starts_with("cpu") ? "cpu" : off.starts_with("nvme") ? "nvme" : "none");
  test::set_option(o, "offload-param", off == "cpu+param" ? "cpu" : off == "cpu+param-nvme" ? "nvme" : "none");
  if (off.find("nvme") != std::string::npos) o.nvme_path = nvme_dir;
}

TEST(LoraZero, EveryStageAndTierTrainsTheSameAdapters) {
  const int N = world->size();
  const std::string nvme = scratch_dir("nvme");
  TrainOptions ref = lora_options(1, DType::f32);
  ref.out = scratch_dir("ref");
  const TrainResult want = test::train_on(nullptr, ref, false);
  ASSERT_EQ(want.steps.size(), 4u);
  EXPECT_LT(want.steps.back().loss, want.steps.front().loss) << "the adapters do not train";
  for (int stage = 0; stage <= 3; ++stage)
    for (const std::string off : {"none", "cpu", "nvme", "cpu+param", "cpu+param-nvme"}) {
      if ((stage == 0 && off != "none") || (off.find("+param") != std::string::npos && stage != 3)) continue;
      TrainOptions o = lora_options(N, DType::f32);
      set_offload(o, stage, off, nvme);
      const TrainResult got = test::train_on(world, o, false);
      ASSERT_EQ(got.steps.size(), want.steps.size());
      for (size_t i = 0; i < got.steps.size(); ++i) {
        const std::string what = "stage " + std::to_string(stage) + ", " + off + ", " + std::to_string(N) +
                                 " ranks, step " + std::to_string(i + 1);
        // The same sums in another order on other rank counts: f32 rounding.
        EXPECT_NEAR(got.steps[i].loss, want.steps[i].loss, 1e-6 * want.steps[i].loss) << what;
        EXPECT_NEAR(got.steps[i].grad_norm, want.steps[i].grad_norm, 1e-5 * want.steps[i].grad_norm) << what;
      }
    }
  std::filesystem::remove_all(nvme);
}

// As ZeroAccounting.PlanTotalsAreWhatRunsAllocate for full training (plan_check.h).
TEST(LoraZero, PlanTotalsAreWhatRunsAllocate) {
  const int N = world->size();
  const std::string nvme = scratch_dir("plan_nvme");
  for (DType dt : {DType::bf16, DType::f32})
    for (int stage = 0; stage <= 3; ++stage)
      for (const std::string off : {"none", "cpu", "nvme", "cpu+param", "cpu+param-nvme"})
        for (bool ckpt : {false, true}) {
          if ((stage == 0 && off != "none") || (off.find("+param") != std::string::npos && stage != 3)) continue;
          if (dt == DType::f32 && (ckpt || off == "nvme")) continue;  // enough f32 rows
          TrainOptions o = lora_options(N, dt);
          o.steps = 3, o.activation_checkpointing = ckpt;
          set_offload(o, stage, off, nvme);
          PlanInput in = plan_input_for(ModelSpec::load(o.model), N);
          in.sub_group_size = o.sub_group_size, in.persistence_threshold = o.param_persistence_threshold;
          in.prefetch_depth = o.prefetch_depth;
          in.mixed = dt != DType::f32, in.micro_batch = o.micro_batch, in.seq_len = o.seq_len, in.threads = 1;
          in.reduce_bucket = o.reduce_bucket_size, in.allgather_bucket = o.allgather_bucket_size;
          in.pin_buffers = o.pin_buffer_count, in.pin_buffer_bytes = int64_t(o.pin_buffer_size);
          in.grad_accum = o.grad_accum, in.grad_clip = o.grad_clip;
          in.lora = o.lora_config();
          if (off == "cpu+param-nvme") {
            // A host budget that holds half of the frozen weights' shard in the NVMe cache: between
            // the plan's host bytes with none of it (a budget of 1 byte) and with all of it.
            in.host_bytes = 1;
            const double none = find_plan_row(make_plan(in), stage, off, ckpt)->host;
            in.host_bytes = 0;
            const double all = find_plan_row(make_plan(in), stage, off, ckpt)->host;
            ASSERT_GT(all, none);
            o.host_mem = size_t((none + all) / 2);
          }
          in.host_bytes = double(o.host_mem);
          const TrainResult r = test::train_on(world, o, false);
          const std::vector<PlanRow> rows = make_plan(in);
          const PlanRow* row = find_plan_row(rows, stage, off, ckpt);
          ASSERT_NE(row, nullptr) << off;
          const std::string what = std::string(dtype_name(dt)) + ", stage " + std::to_string(stage) + ", offload " +
                                   off + (ckpt ? ", ckpt" : "") + ", " + std::to_string(N) + " ranks";
          test::expect_run_is_plan(*row, r, what, 2);  // the frozen weights' cache fills in step 1
          if (off == "cpu+param-nvme") {               // part of the frozen weights comes from the drive each step
            EXPECT_GT(row->traffic.n2h, 0u) << what;
            EXPECT_GE(row->traffic.n2h, row->traffic.min_n2h) << what;
          }
        }
  std::filesystem::remove_all(nvme);
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::test::run_mpi_tests(argc, argv, strata::world, 120.0); }
