// The ZeRO engine on its own, one rank, driven by the fake-model harness (engine_harness.h):
// stages 1-3 and the host tiers agree with stage 0 exactly (f32: the same sums in the same
// order, the same AdamW), stage 3 prefetches by access order within its arena, and the
// plan refuses what cannot run before anything is allocated. The multi-rank equivalence
// runs are in test_zero.cpp (mpirun).
#include <gtest/gtest.h>

#include <filesystem>

#include "cpu/cpu_backend.h"
#include "engine_harness.h"
#include "tier/tier_manager.h"
#include "zero/engine_plan.h"

namespace strata {
namespace {

const std::vector<int64_t> kUnits = {300, 1000, 1000, 700};

zero::ZeroOptions small_options(int stage) {
  zero::ZeroOptions o;
  o.stage = stage;
  o.reduce_bucket_size = 512;  // several buckets
  o.allgather_bucket_size = 512;
  o.sub_group_size = 400;  // several sub-groups per unit
  o.param_persistence_threshold = stage == 3 ? 400 : 0;
  o.prefetch_depth = 1;
  return o;
}

std::vector<float> train(zero::ZeroOptions o, int steps = 3, int micro = 2, zero::ZeroStats* stats = nullptr) {
  cpu::CpuBackend be({size_t(1) << 28, 1});
  std::unique_ptr<tier::TierManager> tiers;
  if (o.offload_optimizer) {
    tier::TierOptions to;
    to.staging_bytes = 4096;  // chunks of 1024 elements: several per bucket
    to.pin_staging = false;
    tiers = std::make_unique<tier::TierManager>(be, to);
  }
  test::EngineHarness h(be, nullptr, o, kUnits, tiers.get());
  for (int t = 1; t <= steps; ++t) h.step(t, micro);
  if (stats) *stats = h.engine().stats();
  return h.params();
}

TEST(Engine, StagesAndHostTiersAgreeWithStageZeroExactly) {
  const std::vector<float> ref = train(small_options(0));
  for (int stage = 1; stage <= 3; ++stage) {
    EXPECT_EQ(train(small_options(stage)), ref) << "stage " << stage;
    zero::ZeroOptions off = small_options(stage);
    off.offload_optimizer = true;
    EXPECT_EQ(train(off), ref) << "stage " << stage << " with the optimizer on the host (speculative)";
    off.speculative_step = false;
    EXPECT_EQ(train(off), ref) << "stage " << stage << " with the optimizer on the host (after backward)";
    off.speculative_step = true;
    off.offload_ratio = 0.5;
    EXPECT_EQ(train(off), ref) << "stage " << stage << " with half the optimizer on the host";
  }
  zero::ZeroOptions param = small_options(3);
  param.offload_optimizer = param.offload_param = true;
  EXPECT_EQ(train(param), ref) << "stage 3 with parameters on the host";
}

TEST(Engine, Stage3PrefetchesInAccessOrderWithinItsArena) {
  zero::ZeroOptions o = small_options(3);
  zero::ZeroStats first, later;
  train(o, 1, 1, &first);
  EXPECT_EQ(first.gathers_prefetched, 0) << "the first step records the access order";
  EXPECT_GT(first.gathers_on_demand, 0);
  train(o, 3, 1, &later);
  EXPECT_GT(later.gathers_prefetched, 0) << "later steps replay it";
  // The smallest arena that holds the largest unit (and its padding) still trains the same.
  o.max_live_params = 1024;  // (1000 + 16 of padding) · 4 bytes, rounded up to 64 bytes
  zero::ZeroStats tight;
  EXPECT_EQ(train(o, 3, 2, &tight), train(small_options(0)));
  EXPECT_LE(tight.live_param_high_water, size_t(o.max_live_params) * 4);
}

TEST(Engine, PlanRefusesWhatCannotRunBeforeAllocating) {
  zero::EnginePlanInput in;
  for (size_t u = 0; u < kUnits.size(); ++u)
    in.params.push_back({test::unit_name(u), int(u), u == 0 ? 0 : 300 + 1000 * int64_t(u - 1), kUnits[u]});
  in.unit_sizes = kUnits;
  in.options = small_options(3);
  in.options.max_live_params = 500;
  try {
    zero::plan_engine(in);
    ADD_FAILURE() << "an arena smaller than the largest unit was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-live-params 500"), std::string::npos) << e.what();
  }
  in.options = small_options(2);
  in.options.offload_param = in.options.offload_optimizer = true;
  EXPECT_THROW(zero::plan_engine(in), Error) << "parameters are offloaded at stage 3 only";
  in.options = small_options(3);
  in.options.hpz_partition_size = 2;
  in.world = 3;
  EXPECT_THROW(zero::plan_engine(in), Error) << "hpZ groups must divide the ranks";
  // What a plan sums is what the engine allocates (attach checks it on every run).
  in.options = small_options(3);
  in.world = 1;
  const zero::EnginePlan plan = zero::plan_engine(in);
  cpu::CpuBackend be({size_t(1) << 28, 1});
  test::EngineHarness h(be, nullptr, in.options, kUnits);
  EXPECT_EQ(h.engine().plan().device_bytes(), plan.device_bytes());
  EXPECT_GT(plan.device.gathered, 0u);
}

}  // namespace
}  // namespace strata
