// Host allocations in the steady-state step: a counting operator new for this binary, and
// training runs whose steps after the first few must allocate nothing on the host either
// (the device side is checked by TrainResult::steady_state_allocations).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <new>

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

// Host allocations per step over steps [3, steps - 1) (the first steps record access
// orders and warm caches; the last one logs).
double allocations_per_step(TrainOptions o, const std::string& name) {
  o.model = test::source_path(o.model.empty() ? "configs/default.json" : o.model);
  o.data = test::source_path("data/default.txt");
  o.micro_batch = 2, o.seq_len = 32, o.steps = 8, o.log_every = 1000, o.quiet = true;
  // One device thread: oneDNN's dnnl_sgemm allocates a scratchpad per call when it runs
  // threaded, which Strata cannot pass in; S14 replaces it with matmul primitives created once
  // per shape. Everything of Strata's own must allocate nothing.
  o.device_threads = 1;
  o.out = (std::filesystem::temp_directory_path() / ("strata_alloc_" + name + std::to_string(getpid()))).string();
  uint64_t at3 = 0, at7 = 0;
  o.on_step_begin = [&](int64_t step) {
    if (step == 3) at3 = g_allocations.load();
    if (step == 7) at7 = g_allocations.load();
  };
  train(o);
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
      {"offload_cpu", [](TrainOptions& o) { o.zero_stage = 2, o.offload_optimizer = "cpu", o.bind_cpus = false; }},
      {"offload_param_cpu",
       [](TrainOptions& o) {
         o.zero_stage = 3, o.offload_optimizer = "cpu", o.offload_param = "cpu", o.bind_cpus = false;
       }},
      {"offload_nvme",
       [](TrainOptions& o) {
         o.zero_stage = 3, o.offload_optimizer = "nvme", o.offload_param = "nvme", o.bind_cpus = false;
         o.nvme_path =
             (std::filesystem::temp_directory_path() / ("strata_alloc_nvme" + std::to_string(getpid()))).string();
         std::filesystem::create_directories(o.nvme_path);
       }},
  };
  for (const Case& c : cases) {
    TrainOptions o;
    c.set(o);
    EXPECT_EQ(allocations_per_step(o, c.name), 0.0) << c.name << ": host allocations per steady-state step";
  }
}

}  // namespace
}  // namespace strata
