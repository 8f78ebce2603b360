// Harness timing DeepSpeed's CPU Adam (csrc/adam/cpu_adam_impl.cpp) on raw arrays, for
// `strata bench adam --peer`. This file is Strata's; DeepSpeed's sources are compiled in
// from a checkout given to build_ds_cpu_adam.sh and are never committed here.
//
//   ds_cpu_adam_bench N THREADS REPEATS plain|copy|bf16
// plain: Adam_Optimizer::Step_8 (DeepSpeed's fastest entry point) on f32 params/grads/states.
// copy : the same step followed by a separate f32->bf16 (round-to-nearest-even) pass, as
//        DeepSpeed does since it removed its fused copy-out in 2024.
// bf16 : DeepSpeed's 16-bit-state step, Step_8<c10::BFloat16, c10::BFloat16>: parameters,
//        gradients and both moments in bf16 (the instantiation its dispatcher runs for bf16
//        states; it has no f32-parameter, bf16-state one). Built from a source without it,
//        the harness says so and which DeepSpeed it is.
// Prints one JSON line: {"params_per_s": ..., "deepspeed": VERSION, "commit": ...}.
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cpu_adam_impl.cpp"  // DeepSpeed's kernel, from -I DeepSpeed/csrc/adam

#ifndef DS_VERSION
#define DS_VERSION "unknown"
#define DS_COMMIT "unknown"
#endif
#ifndef DS_HAS_BF16_STATE
#define DS_HAS_BF16_STATE 0
#endif
// DeepSpeed's Step_8 became a template over the parameter and state types with its 16-bit
// states; before that it took f32 arrays only.
#if DS_TEMPLATED_STEP
#define DS_STEP_F32(opt, p, g, m, v, n) (opt).Step_8<float, float>(p, g, m, v, n)
#else
#define DS_STEP_F32(opt, p, g, m, v, n) (opt).Step_8(p, g, m, v, n)
#endif

static float* alloc(size_t n) {
  void* p = mmap(nullptr, n * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::exit(2);
  madvise(p, n * 4, MADV_HUGEPAGE);
  return static_cast<float*>(p);
}

// The best of `repeats` timed DeepSpeed steps (its step counter and bias corrections advanced
// as its optimizer wrapper does), each `step()` then `after()`.
template <class Step, class After>
static double best_of(int repeats, Step&& step, After&& after) {
  Adam_Optimizer opt(1e-4f, 0.9f, 0.999f, 1e-8f, 0.01f, true);
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    opt.IncrementStep(size_t(r + 1), 0.9f, 0.999f);
    opt.update_state(1e-4f, 1e-8f, 0.01f, true);
    step(opt);
    after();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = dt < best ? dt : best;
  }
  return best;
}

static void report(size_t n, double best, const char* mode, int threads) {
  std::printf(
      "{\"params_per_s\": %.6e, \"step_s\": %.6e, \"mode\": \"%s\", \"threads\": %d, \"deepspeed\": \"%s\", "
      "\"commit\": \"%s\"}\n",
      double(n) / best, best, mode, threads, DS_VERSION, DS_COMMIT);
}

// DeepSpeed's 16-bit-state step on bf16 parameters, gradients and moments.
static int run_bf16(size_t n, int threads, int repeats) {
#if DS_HAS_BF16_STATE
  using bf16 = c10::BFloat16;
  auto* p = reinterpret_cast<bf16*>(alloc(n / 2 + 1));
  auto* g = reinterpret_cast<bf16*>(alloc(n / 2 + 1));
  auto* m = reinterpret_cast<bf16*>(alloc(n / 2 + 1));
  auto* v = reinterpret_cast<bf16*>(alloc(n / 2 + 1));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    p[i] = bf16(float(i % 1000) * 1e-3f - 0.5f);
    g[i] = bf16(float(i % 777) * 1e-5f - 3e-3f);
    m[i] = bf16(0.0f), v[i] = bf16(0.0f);
  }
  const double best = best_of(
      repeats, [&](Adam_Optimizer& opt) { opt.Step_8<bf16, bf16>(p, g, m, v, n); }, [] {});
  report(n, best, "bf16", threads);
  return 0;
#else
  (void)n, (void)threads, (void)repeats;
  std::printf(
      "{\"error\": \"DeepSpeed %s (%s) has no 16-bit-state CPU Adam step\", \"deepspeed\": \"%s\", "
      "\"commit\": \"%s\"}\n",
      DS_VERSION, DS_COMMIT, DS_VERSION, DS_COMMIT);
  return 3;
#endif
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s N THREADS REPEATS plain|copy|bf16\n", argv[0]);
    return 2;
  }
  const size_t n = std::strtoull(argv[1], nullptr, 10);
  const int threads = std::atoi(argv[2]), repeats = std::atoi(argv[3]);
  const bool copy = !std::strcmp(argv[4], "copy"), bf16 = !std::strcmp(argv[4], "bf16");
  omp_set_num_threads(threads);
  if (bf16) return run_bf16(n, threads, repeats);
  float *p = alloc(n), *g = alloc(n), *m = alloc(n), *v = alloc(n);
  uint16_t* out = reinterpret_cast<uint16_t*>(alloc(n / 2 + 1));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    p[i] = float(i % 1000) * 1e-3f - 0.5f;
    g[i] = float(i % 777) * 1e-5f - 3e-3f;
    m[i] = 0, v[i] = 0;
    if (i % 2 == 0) out[i / 2] = 0;
  }
  const double best = best_of(
      repeats, [&](Adam_Optimizer& opt) { DS_STEP_F32(opt, p, g, m, v, n); },
      [&] {
        if (!copy) return;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; ++i) {
          uint32_t u;
          std::memcpy(&u, &p[i], 4);
          out[i] = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        }
      });
  report(n, best, copy ? "copy" : "plain", threads);
  return 0;
}
