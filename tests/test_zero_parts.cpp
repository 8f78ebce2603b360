// The ZeRO engine's parts on one process: bucket plans (packing N simulated ranks, exact on
// integer values), the unit arena, the recorded access order, persistence in the layout,
// and the fp16 loss scaler's policy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_stream.h"
#include "tier/tier_manager.h"
#include "train/loss_scaler.h"
#include "zero/access_order.h"
#include "zero/bucket_plan.h"
#include "zero/partition.h"
#include "zero/unit_arena.h"

namespace strata::zero {
namespace {

std::vector<ParamSpan> table(int64_t persist_below = 0) {
  std::vector<ParamSpan> t;
  int64_t off = 0;
  auto add = [&](const std::string& n, int unit, int64_t c) {
    t.push_back({n, unit, off, c, c < persist_below});
    off += c;
  };
  add("wte", 0, 1200), add("wpe", 0, 302);
  for (int l = 0; l < 3; ++l)
    add("w1", 1 + l, 1000), add("b1", 1 + l, 31), add("w2", 1 + l, 1000), add("b2", 1 + l, 17);
  add("lnfw", 4, 16), add("lnfb", 4, 16);
  return t;
}

float grad_of(int rank, int64_t i) { return float(int64_t((i * 7 + rank * 13) % 23) - 11); }

// Reduce-scatter through the plan's buckets on N simulated ranks equals the element-wise
// sum at each rank's owned positions, and an all-gather through the plan rebuilds the whole.
TEST(BucketPlan, ReduceScatterAndAllGatherThroughBuckets) {
  cpu::CpuBackend be({size_t(1) << 20, 1});  // host vectors: the compute stream runs the copies at once
  for (int N : {1, 2, 3, 4}) {
    for (int64_t sgs : {int64_t(100), int64_t(700), int64_t(1) << 30}) {
      for (int64_t bucket : {int64_t(16), int64_t(500), int64_t(2999), int64_t(1) << 40}) {
        const PartitionLayout lay(table(), N, sgs);
        const BucketPlan plan(lay, bucket);
        const int64_t S = lay.shard_elements(), n = lay.model_elements();
        // The buckets tile [0, S) from the top, each at most bucket/N wide (or one quantum).
        int64_t hi = S;
        for (const Bucket& b : plan.buckets()) {
          EXPECT_EQ(b.hi, hi);
          EXPECT_LE(b.width(), std::max<int64_t>(16, bucket / N));
          int64_t covered = 0;
          for (const BucketPiece& p : b.pieces) covered += p.hi - p.lo;
          EXPECT_EQ(covered, b.width()) << "pieces tile the bucket";
          hi = b.lo;
        }
        EXPECT_EQ(hi, 0);
        std::vector<std::vector<float>> grads(size_t(N), std::vector<float>(size_t(n), 0.0f));
        for (int r = 0; r < N; ++r)
          for (int64_t i = 0; i < n; ++i) grads[size_t(r)][size_t(i)] = grad_of(r, i);
        std::vector<std::vector<float>> shard(size_t(N), std::vector<float>(size_t(S), -999.0f));
        std::vector<float> buf(size_t(N * plan.max_width()) * size_t(N));
        for (size_t k = 0; k < plan.buckets().size(); ++k) {
          const Bucket& b = plan.buckets()[k];
          std::vector<std::vector<float>> packed(size_t(N), std::vector<float>(size_t(N * b.width()), -1));
          for (int r = 0; r < N; ++r)
            for (const BucketPiece& p : b.pieces)
              pack_piece(be, be.compute_stream(), lay, b, p,
                         grads[size_t(r)].data() + lay.sub_groups()[size_t(p.group)].flat_begin, DType::f32,
                         packed[size_t(r)].data());
          for (int r = 0; r < N; ++r)  // reduce-scatter: rank r gets the sum of block r
            for (int64_t j = 0; j < b.width(); ++j) {
              float s = 0;
              for (int q = 0; q < N; ++q) s += packed[size_t(q)][size_t(r * b.width() + j)];
              shard[size_t(r)][size_t(b.lo + j)] = s;
            }
        }
        for (int r = 0; r < N; ++r) {
          for (const OwnedPiece& op : lay.owned_pieces(r))
            for (int64_t j = 0; j < op.count; ++j) {
              float s = 0;
              for (int q = 0; q < N; ++q) s += grad_of(q, op.flat_begin + j);
              ASSERT_EQ(shard[size_t(r)][size_t(op.shard_offset + j)], s) << "N " << N << " bucket " << bucket;
            }
        }
        // Padding positions of every shard are exactly zero.
        for (int r = 0; r < N; ++r) {
          std::vector<char> owned(size_t(S), 0);
          for (const OwnedPiece& op : lay.owned_pieces(r)) std::fill_n(owned.begin() + op.shard_offset, op.count, 1);
          for (int64_t j = 0; j < S; ++j)
            if (!owned[size_t(j)]) {
              ASSERT_EQ(shard[size_t(r)][size_t(j)], 0.0f) << "padding at " << j;
            }
        }
        // All-gather: every rank's shard into the bucket, unpacked into a full copy.
        std::vector<float> full(size_t(n) + 1, -5.0f);  // one guard element past the end
        for (const Bucket& b : plan.buckets()) {
          std::vector<float> gathered(size_t(N * b.width()));
          for (int r = 0; r < N; ++r)
            std::copy_n(shard[size_t(r)].begin() + b.lo, b.width(), gathered.begin() + r * b.width());
          for (const BucketPiece& p : b.pieces)
            unpack_piece(be, be.compute_stream(), lay, b, p, gathered.data(), 4,
                         full.data() + lay.sub_groups()[size_t(p.group)].flat_begin);
        }
        for (int64_t i = 0; i < n; ++i) {
          float s = 0;
          for (int q = 0; q < N; ++q) s += grad_of(q, i);
          ASSERT_EQ(full[size_t(i)], s) << "element " << i;
        }
        EXPECT_EQ(full[size_t(n)], -5.0f) << "guard element overwritten";
      }
    }
  }
}

TEST(BucketPlan, AccumulateIn16BitRoundsToNearestEven) {
  std::vector<uint16_t> acc(20, 0);
  std::vector<float> add(20);
  for (int i = 0; i < 20; ++i) add[size_t(i)] = 1.0f + float(i) / 3.0f;
  accumulate_into(acc.data(), DType::bf16, add.data(), 20, false);
  accumulate_into(acc.data(), DType::bf16, add.data(), 20, true);
  for (int i = 0; i < 20; ++i) {
    const float once = bf16_to_f32(f32_to_bf16(add[size_t(i)]));
    EXPECT_EQ(acc[size_t(i)], f32_to_bf16(once + add[size_t(i)])) << i;
  }
  std::vector<uint16_t> h(9, 0);
  std::vector<float> big(9, 70000.0f);  // past f16's 65504: overflow shows as +Inf
  accumulate_into(h.data(), DType::f16, big.data(), 9, false);
  for (uint16_t v : h) EXPECT_EQ(v, 0x7c00);
}

TEST(PartitionLayout, PersistentParametersGetTheirOwnSubGroups) {
  const PartitionLayout lay(table(100), 3, 1 << 30);
  for (const SubGroup& g : lay.sub_groups())
    for (const ParamSpan& p : lay.params())
      if (p.offset < g.flat_begin + g.count && p.offset + p.count > g.flat_begin) {
        EXPECT_EQ(p.persistent, g.persistent) << p.name;
      }
  // b1, b2 (31, 17) and the final norm are persistent: per layer w1 | b1 | w2 | b2.
  int persistent = 0;
  for (const SubGroup& g : lay.sub_groups()) persistent += g.persistent;
  EXPECT_EQ(persistent, 3 * 2 + 1);
}

TEST(UnitArena, FirstFitReleaseAndPendingReclaim) {
  cpu::CpuBackend be({size_t(1) << 20, 1});
  UnitArena a;
  a.reset(1024, 8);
  const int64_t x = a.allocate(300), y = a.allocate(300), z = a.allocate(300);
  EXPECT_EQ(x, 0);
  EXPECT_EQ(y, 320);  // 64-byte aligned
  EXPECT_EQ(z, 640);
  EXPECT_EQ(a.allocate(100), -1);
  a.release(y);
  EXPECT_EQ(a.allocate(256), 320);  // first fit into the hole
  auto stream = be.make_stream("s");
  auto ev = be.make_event();
  std::atomic<bool> go{false};
  dynamic_cast<cpu::CpuStream&>(*stream).enqueue([&] {
    while (!go) std::this_thread::yield();
  });
  stream->record(*ev);
  a.release_after(z, ev.get());
  EXPECT_EQ(a.allocate(300), -1) << "pending until the event completes";
  go = true;
  EXPECT_TRUE(a.reclaim_oldest());
  EXPECT_EQ(a.allocate(300), 576) << "first fit: right after the block at 320";
  EXPECT_FALSE(a.reclaim_oldest());
  EXPECT_LE(a.high_water(), 1024u);
}

TEST(AccessOrder, RecordsThenReplaysAndNotesLastUses) {
  AccessOrder o;
  o.reset(4);
  auto step = [&](const std::vector<std::vector<int>>& passes) {
    o.begin_step();
    for (const auto& p : passes) {
      o.begin_pass();
      for (int u : p) o.use(u);
    }
    o.end_step();
  };
  const std::vector<std::vector<int>> gpt = {{0, 1, 2, 3, 0}, {0, 3, 2, 1}};
  EXPECT_FALSE(o.replaying());
  step(gpt);
  ASSERT_TRUE(o.replaying());
  ASSERT_EQ(o.size(), 9);
  EXPECT_FALSE(o.last_in_pass(0)) << "the embeddings are used again at the end of the forward";
  EXPECT_TRUE(o.last_in_pass(4));
  EXPECT_TRUE(o.last_in_pass(5));
  EXPECT_EQ(o.pass_at(5), 1);
  step(gpt);
  EXPECT_EQ(o.steps_replayed(), 1);
  EXPECT_EQ(o.deviations(), 0);
  // A different order: the step finishes on demand and becomes the new plan.
  step({{0, 2, 1, 3}, {3, 0}});
  EXPECT_EQ(o.deviations(), 1);
  EXPECT_EQ(o.size(), 6);
  EXPECT_EQ(o.unit_at(1), 2);
  step({{0, 2, 1, 3}, {3, 0}});
  EXPECT_EQ(o.steps_replayed(), 2);
}

}  // namespace
}  // namespace strata::zero

namespace strata {
namespace {

// DeepSpeed's DynamicLossScaler: halve after `hysteresis` overflows, double after `window`
// clean steps (counted from the last overflow), never below the floor.
TEST(LossScaler, FollowsDeepSpeedsDynamicPolicy) {
  LossScaler s({true, true, 1, 4, 3, 2, 2});
  EXPECT_EQ(s.scale(), 16);
  s.update(true);  // first overflow: hysteresis 2 -> 1, scale kept
  EXPECT_EQ(s.scale(), 16);
  s.update(true);  // second: halve
  EXPECT_EQ(s.scale(), 8);
  s.update(true);
  EXPECT_EQ(s.scale(), 4);
  s.update(false), s.update(false);
  EXPECT_EQ(s.scale(), 4);
  s.update(false);  // third clean step since the overflow: double, hysteresis restored
  EXPECT_EQ(s.scale(), 8);
  for (int i = 0; i < 10; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 2) << "the floor";
  LossScaler fixed({true, false, 128, 16, 3, 2, 1});
  fixed.update(true);
  EXPECT_EQ(fixed.scale(), 128);
  LossScaler off({false});
  EXPECT_EQ(off.scale(), 1);
  EXPECT_THROW(LossScaler({true, true, 1, 16, 0, 2, 1}), Error);
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Every buffer taken and none released yet: acquire waits for a release instead of treating
// the "taken" mark as an event to wait on.
TEST(StagingPool, AcquireWaitsForAReleaseWhenEveryBufferIsTaken) {
  cpu::CpuBackend be({size_t(64) << 20, 1});
  MemoryBudget host("host", size_t(64) << 20);
  tier::StagingPool pool(be, 2, 4096, false, host);
  const int a = pool.acquire(), b = pool.acquire();
  ASSERT_NE(a, b);
  std::atomic<int> third{-1};
  std::thread waiter([&] { third = pool.acquire(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(third.load(), -1) << "acquire took a buffer that was still taken";
  auto stream = be.make_stream("test");
  auto done = be.make_event();
  stream->launch_host([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  stream->record(*done);
  pool.release_after(b, *done);  // free once the stream's work is done
  waiter.join();
  EXPECT_EQ(third.load(), b);
  EXPECT_TRUE(done->ready());  // it waited for the work on the buffer
  pool.release_after(a, *done);
  pool.release_after(b, *done);
}

}  // namespace
}  // namespace strata
