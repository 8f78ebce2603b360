// Host allocations in the steady-state step: a counting operator new for this binary, and
// training runs whose steps after the first few must allocate nothing on the host either
// (the device side is checked by TrainResult::steady_state_allocations).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "cpu/gemm_lowp.h"
#include "test_util.h"
#include "train/trainer.h"

namespace {
std::atomic<uint64_t> g_allocations{0};
}

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void* operator new(size_t n, std::align_val_t a) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::aligned_alloc(size_t(a), (n + size_t(a) - 1) / size_t(a) * size_t(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) { return operator new(n, a); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace strata {
namespace {

// The steady-state check is of Strata's own code: on AMX the default 16-bit path is oneDNN's
// matmul primitive (cpu/gemm_path.h), whose execution allocates its argument map at every
// call (OneDnnMatmulAllocatesOnlyPerCall, below), so there the check takes Strata's
// AVX512-BF16 kernel instead (every AMX CPU has AVX512-BF16). Elsewhere the default path, or
// the one STRATA_LOWP_GEMM names. Set before anything reads the mode.
const bool kPinnedPath = [] {
  if (!std::getenv("STRATA_LOWP_GEMM") && cpu::default_lowp_gemm(cpu::this_gemm_cpu()) == cpu::LowpGemm::onednn)
    setenv("STRATA_LOWP_GEMM", "strata", 1);
  return true;
}();

// Host allocations per step over steps [3, steps - 1) (the first steps record access
// orders and warm caches; the last one logs).
double allocations_per_step(TrainOptions o, const std::string& name) {
  o.model = test::source_path(o.model.empty() ? "configs/default.json" : o.model);
  o.data = test::source_path("data/default.txt");
  o.micro_batch = 2, o.seq_len = 32, o.steps = 8, o.log_every = 1000, o.quiet = true;
  // One device thread: oneDNN's dnnl_sgemm allocates a scratchpad per call when it runs
  // threaded, which Strata cannot pass in. Everything of Strata's own must allocate nothing.
  o.device_threads = 1;
  o.out = (std::filesystem::temp_directory_path() / ("strata_alloc_" + name + std::to_string(getpid()))).string();
  uint64_t at3 = 0, at7 = 0;
  TrainContext count;
  count.on_step_begin = [&](int64_t step) {
    if (step == 3) at3 = g_allocations.load();
    if (step == 7) at7 = g_allocations.load();
  };
  train(o, count);
  std::filesystem::remove_all(o.out);
  return double(at7 - at3) / 4.0;
}

TEST(HostAllocations, TheSteadyStateStepAllocatesNothing) {
  struct Case {
    const char* name;
    void (*set)(TrainOptions&);
  };
  const Case cases[] = {
      {"f32", [](TrainOptions&) {}},
      {"bf16", [](TrainOptions& o) { o.precision = DType::bf16; }},
      {"llama", [](TrainOptions& o) { o.model = "configs/llama-bytes.json"; }},
      {"checkpointing", [](TrainOptions& o) { o.activation_checkpointing = true; }},
      {"offload_cpu",
       [](TrainOptions& o) { o.zero_stage = 2, o.offload_optimizer = zero::OffloadTier::cpu, o.bind_cpus = false; }},
      {"offload_param_cpu",
       [](TrainOptions& o) {
         o.zero_stage = 3, o.offload_optimizer = o.offload_param = zero::OffloadTier::cpu, o.bind_cpus = false;
       }},
      {"offload_nvme",
       [](TrainOptions& o) {
         o.zero_stage = 3, o.offload_optimizer = o.offload_param = zero::OffloadTier::nvme, o.bind_cpus = false;
         o.nvme_path =
             (std::filesystem::temp_directory_path() / ("strata_alloc_nvme" + std::to_string(getpid()))).string();
         std::filesystem::create_directories(o.nvme_path);
       }},
      // Adapters over frozen weights partitioned on NVMe (a small host budget: part of them is
      // read from the drive every step, the rest from the cache).
      {"lora_frozen_nvme",
       [](TrainOptions& o) {
         o.model = "configs/llama-bytes.json", o.lora_rank = 4, o.lora_targets = "all-linear";
         o.zero_stage = 3, o.offload_optimizer = o.offload_param = zero::OffloadTier::nvme, o.bind_cpus = false;
         o.offload_optimizer = zero::OffloadTier::cpu, o.param_persistence_threshold = 0;
         o.pin_buffer_count = 2, o.pin_buffer_size = size_t(256) << 10, o.host_mem = size_t(2) << 20;
         o.nvme_path =
             (std::filesystem::temp_directory_path() / ("strata_alloc_lora" + std::to_string(getpid()))).string();
         std::filesystem::create_directories(o.nvme_path);
       }},
  };
  for (const Case& c : cases) {
    TrainOptions o;
    c.set(o);
    EXPECT_EQ(allocations_per_step(o, c.name), 0.0) << c.name << ": host allocations per steady-state step";
  }
}

// oneDNN's matmul primitive (the 16-bit default on AMX): made once per shape, so a call after
// the first allocates only what oneDNN's execution itself does (its argument map and execution
// context: a few small blocks), never a primitive or a scratchpad.
TEST(HostAllocations, OneDnnMatmulAllocatesOnlyPerCall) {
  ASSERT_TRUE(kPinnedPath);
  const int64_t M = 64, N = 96, K = 128;
  std::vector<uint16_t> a(size_t(M * K), 0x3f80), b(size_t(K * N), 0x3f80);  // bf16 ones
  std::vector<float> c(size_t(M * N), 0.0f);
  auto call = [&] {
    return cpu::lowp_gemm(M, N, K, 1.0f, {a.data(), DType::bf16, K, false}, {b.data(), DType::bf16, N, false}, 0.0f,
                          c.data(), N);
  };
  const uint64_t before_first = g_allocations.load();
  if (!call()) GTEST_SKIP() << "oneDNN has no native bf16 matmul on this CPU";
  const uint64_t first = g_allocations.load() - before_first, before = g_allocations.load();
  constexpr int kCalls = 100;
  for (int i = 0; i < kCalls; ++i) ASSERT_TRUE(call());
  const double per_call = double(g_allocations.load() - before) / kCalls;
  std::printf("oneDNN matmul: %llu allocations on the first call, %.2f per later call\n",
              static_cast<unsigned long long>(first), per_call);
  EXPECT_LE(per_call, 8.0) << "oneDNN's execution allocates more than its argument map";
  EXPECT_LT(per_call, double(first)) << "the first call should be the one that makes the primitive";
  EXPECT_EQ(c[0], float(K));
}

}  // namespace
}  // namespace strata
