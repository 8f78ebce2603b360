// The CPU backend as a device: its memory budget, streams, events and async copies.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/arena_allocator.h"
#include "backend/device.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_stream.h"

namespace strata {
namespace {

TEST(Budget, ExceedingItIsAClearError) {
  cpu::CpuBackend be({size_t(1) << 20, 1});
  Buffer a = be.allocate(600 << 10, "activations");
  EXPECT_EQ(be.budget().used(), size_t(600) << 10);
  try {
    Buffer b = be.allocate(600 << 10, "params:master_f32");
    FAIL() << "allocation past the budget succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device memory budget exceeded"), std::string::npos) << m;
    EXPECT_NE(m.find("params:master_f32"), std::string::npos) << m;  // the request
    EXPECT_NE(m.find("600.00 KiB"), std::string::npos) << m;         // its size
    EXPECT_NE(m.find("1.00 MiB"), std::string::npos) << m;           // the budget
    EXPECT_NE(m.find("--device-mem"), std::string::npos) << m;       // what to do
  }
  EXPECT_EQ(be.budget().used(), size_t(600) << 10);  // the failed request charged nothing
  a = Buffer();
  EXPECT_EQ(be.budget().used(), 0u);
  EXPECT_EQ(be.budget().high_water(), size_t(600) << 10);
  Buffer c = be.allocate(900 << 10, "fits now");
  EXPECT_NE(c.data(), nullptr);
}

TEST(Buffer, ViewsAreBoundsChecked) {
  cpu::CpuBackend be({size_t(1) << 20, 1});
  Buffer a = be.allocate(64, "x");
  EXPECT_NO_THROW(a.view(DType::f32, {16}));
  EXPECT_THROW(a.view(DType::f32, {17}), Error);
  EXPECT_THROW(a.view(DType::bf16, {16}, 40), Error);
  EXPECT_EQ(a.view(DType::f32, {4}).tier, Tier::device);
}

TEST(Stream, RunsWorkInOrderOnItsOwnThread) {
  cpu::CpuBackend be({size_t(1) << 20, 1});
  auto s = be.make_stream("copy");
  auto& cs = dynamic_cast<cpu::CpuStream&>(*s);
  std::vector<int> order;
  std::thread::id worker;
  for (int i = 0; i < 100; ++i) cs.enqueue([&, i] { order.push_back(i), worker = std::this_thread::get_id(); });
  s->synchronize();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[size_t(i)], i);
  EXPECT_NE(worker, std::this_thread::get_id());
}

// fill_zero at every size class: small (memset), and past 16 MiB (streamed stores in
// parallel chunks, with an unaligned head and a tail), on the compute stream and on a worker
// stream; the bytes around the range stay as they were.
TEST(Stream, FillZeroClearsExactlyItsRange) {
  cpu::CpuBackend be({size_t(64) << 20, 2});
  auto worker = be.make_stream("copy");
  Buffer b = be.allocate(size_t(40) << 20, "fill");
  auto* p = b.as<unsigned char>();
  for (const size_t bytes : {size_t(1), size_t(100), (size_t(20) << 20) + 7, (size_t(33) << 20) + 29})
    for (Stream* s : {&be.compute_stream(), worker.get()}) {
      SCOPED_TRACE(std::to_string(bytes) + " bytes on " + s->name());
      std::memset(p, 0xab, b.bytes());
      be.fill_zero(p + 3, bytes, *s);
      s->synchronize();
      EXPECT_EQ(p[0], 0xab);
      EXPECT_EQ(p[2], 0xab);
      EXPECT_EQ(p[3 + bytes], 0xab);
      size_t nonzero = 0;
      for (size_t i = 3; i < 3 + bytes; ++i) nonzero += p[i] != 0;
      EXPECT_EQ(nonzero, 0u);
    }
}

// A copy enqueued on a stream must make progress while the caller computes: the stream
// work below can only finish because the caller is free to release it.
TEST(Stream, CopiesOverlapTheCallersCompute) {
  cpu::CpuBackend be({size_t(64) << 20, 1});
  auto s = be.make_stream("h2d");
  auto ev = be.make_event();
  Buffer src = be.allocate(8 << 20, "src"), dst = be.allocate(8 << 20, "dst");
  std::vector<char> sevens(src.bytes(), 7);
  be.upload(src.data(), sevens.data(), sevens.size());
  std::atomic<bool> release{false};
  dynamic_cast<cpu::CpuStream&>(*s).enqueue([&] {
    while (!release.load()) std::this_thread::yield();
  });
  be.copy_async(dst.data(), src.data(), src.bytes(), *s);
  s->record(*ev);
  EXPECT_FALSE(ev->ready());  // queued behind the gate: the call returned without waiting
  release = true;             // "compute" on this thread releases it
  ev->synchronize();
  EXPECT_TRUE(ev->ready());
  char last = 0;
  be.download(&last, static_cast<char*>(dst.data()) + src.bytes() - 1, 1);
  EXPECT_EQ(last, 7);
}

TEST(Stream, WaitOrdersAcrossStreams) {
  cpu::CpuBackend be({size_t(1) << 20, 1});
  auto a = be.make_stream("a"), b = be.make_stream("b");
  auto ev = be.make_event();
  std::atomic<int> step{0};
  int seen_by_b = -1;
  dynamic_cast<cpu::CpuStream&>(*a).enqueue([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    step = 1;
  });
  a->record(*ev);
  b->wait(*ev);
  dynamic_cast<cpu::CpuStream&>(*b).enqueue([&] { seen_by_b = step.load(); });
  b->synchronize();
  EXPECT_EQ(seen_by_b, 1);
}

// An event stands for its latest recording (as in CUDA): re-recording it while an earlier
// recording is still queued must not let the earlier completion complete the event.
TEST(Stream, ReRecordedEventWaitsForItsLatestRecording) {
  cpu::CpuBackend be({size_t(1) << 20, 1});
  auto s = be.make_stream("s");
  auto& cs = dynamic_cast<cpu::CpuStream&>(*s);
  auto ev = be.make_event();
  std::atomic<int> gate{0};
  cs.enqueue([&] {
    while (gate.load() < 1) std::this_thread::yield();
  });
  s->record(*ev);
  cs.enqueue([&] {
    while (gate.load() < 2) std::this_thread::yield();
  });
  s->record(*ev);
  gate = 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(ev->ready()) << "the first recording's completion completed the re-recorded event";
  gate = 2;
  ev->synchronize();
  EXPECT_TRUE(ev->ready());
}

TEST(Stream, ErrorsSurfaceAtSynchronizeAndEventsStillFire) {
  cpu::CpuBackend be({size_t(1) << 20, 1});
  auto s = be.make_stream("s");
  auto ev = be.make_event();
  bool ran_after = false;
  auto& cs = dynamic_cast<cpu::CpuStream&>(*s);
  cs.enqueue([] { throw_error("copy failed", "test"); });
  cs.enqueue([&] { ran_after = true; });
  s->record(*ev);
  EXPECT_THROW(ev->synchronize(), Error);  // the waiter learns of the failure, no hang
  EXPECT_THROW(s->synchronize(), Error);
  EXPECT_FALSE(ran_after);  // work after a failure is skipped
  s->synchronize();         // the error is reported once
}

}  // namespace

// The CUDA backend's device memory: pieces of one range, reused and merged when freed.
TEST(Arena, CarvesFirstFitAndMergesFreedNeighbours) {
  ArenaAllocator a(4096, 256);
  const size_t x = a.allocate(100), y = a.allocate(300), z = a.allocate(256);
  EXPECT_EQ(x, 0u);
  EXPECT_EQ(y, 256u);  // 100 rounded up to the alignment
  EXPECT_EQ(z, 768u);  // 300 -> 512
  EXPECT_EQ(a.used(), 1024u);
  EXPECT_EQ(a.allocate(4096), ArenaAllocator::kNone);  // too large: the caller reports it
  a.free(y, 300);
  EXPECT_EQ(a.allocate(200), 256u);  // first fit reuses the hole
  a.free(256, 200);
  a.free(x, 100);
  a.free(z, 256);  // all three merge back into one range
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.largest_free(), 4096u);
  EXPECT_EQ(a.allocate(4096), 0u);
}

TEST(Arena, DoubleFreeIsAnError) {
  ArenaAllocator a(1 << 20);
  const size_t x = a.allocate(1000);
  a.allocate(1000);
  a.free(x, 1000);
  EXPECT_THROW(a.free(x, 1000), Error);
  EXPECT_THROW(a.free(1 << 21, 10), Error);
}

// --device: the CPU on request; auto is cuda where a GPU can run it and the CPU elsewhere;
// cuda where it cannot is an error saying what is missing.
TEST(Device, ChosenAtRunTime) {
  EXPECT_EQ(resolve_device("cpu"), "cpu");
  EXPECT_TRUE(make_backend("cpu", {size_t(16) << 20, 1})->name().starts_with("cpu"));
  EXPECT_THROW(resolve_device("tpu"), Error);
  const std::string chosen = resolve_device("auto");
  if (chosen == "cuda") {  // a GPU machine (tools/gpu-check.sh): cuda is then what it asks for
    EXPECT_EQ(resolve_device("cuda"), "cuda");
    return;
  }
  EXPECT_EQ(chosen, "cpu");
  try {
    resolve_device("cuda");
    ADD_FAILURE() << "--device cuda accepted where auto chose the CPU";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("this build has no CUDA") != std::string::npos ||
                m.find("no GPU is visible") != std::string::npos)
        << m;
  }
}

// In opaque mode a device buffer's address is not host-addressable; only the backend's
// copies and ops reach it. A direct store through it must crash at once.
TEST(OpaqueDevice, DirectDereferenceCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  cpu::CpuBackend be({size_t(1) << 20, 1, /*opaque=*/true});
  Buffer b = be.allocate(64, "test:opaque");
  // Dies of SIGSEGV (under AddressSanitizer: its SEGV report and exit 1); getting past the
  // access would exit 0, which is not a death.
  EXPECT_DEATH(
      {
        *static_cast<volatile float*>(b.data()) = 1.0f;
        std::exit(0);
      },
      "");
  EXPECT_DEATH(
      {
        std::fprintf(stderr, "%f\n", double(*static_cast<volatile float*>(b.data())));
        std::exit(0);
      },
      "");
  // The control: without opaque mode the same store is an ordinary host store.
  cpu::CpuBackend plain({size_t(1) << 20, 1, /*opaque=*/false});
  Buffer p = plain.allocate(64, "test:plain");
  *static_cast<volatile float*>(p.data()) = 1.0f;
  EXPECT_EQ(*static_cast<volatile float*>(p.data()), 1.0f);
}

TEST(OpaqueDevice, CopiesAndOpsReachTheMemory) {
  cpu::CpuBackend be({size_t(1) << 20, 1, /*opaque=*/true});
  Buffer a = be.allocate(8 * 4, "test:a"), c = be.allocate(8 * 4, "test:c");
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8}, y(8);
  EXPECT_NE(a.data(), nullptr);
  be.upload(a.data(), x.data(), 32);
  be.residual_forward(c.view(DType::f32, {8}), a.view(DType::f32, {8}), a.view(DType::f32, {8}));
  be.download(y.data(), c.data(), 32);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(y[size_t(i)], 2 * x[size_t(i)]);
  // On a worker stream too: accumulate, square sum into a device scalar, then read it back.
  auto s = be.make_stream("test");
  Buffer sum = be.allocate(8, "test:sum");
  be.convert(c.data(), DType::f32, a.data(), DType::f32, 8, true, *s);
  be.sum_squares(sum.as<double>(), c.data(), DType::f32, 8, false, *s);
  s->synchronize();
  double sq = 0;
  be.download(&sq, sum.data(), 8);
  EXPECT_EQ(sq, 9.0 * (1 + 4 + 9 + 16 + 25 + 36 + 49 + 64));
}

}  // namespace strata
