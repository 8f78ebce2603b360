// Collectives under real mpirun (1-4 ranks): exact results on integer-valued inputs
// (nccl-tests' trick: every rank can compute the expected answer on its own), the counted
// volumes, and the two failure modes that must never hang: a mismatched collective and a
// rank that does not show up.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/error.h"
#include "mpi_test_main.h"
#include "train/node_share.h"

namespace strata {
namespace {

MpiComm* world = nullptr;

// Element i of rank r's input: small integers, so any summation order is exact.
template <typename T>
T value(int r, size_t i) {
  return T(int64_t((i * 7 + size_t(r) * 13) % 101) - 50);
}

template <typename T>
void check_all_reduce(size_t n) {
  const int N = world->size(), me = world->rank();
  std::vector<T> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = value<T>(me, i);
  std::vector<T> mx = x, mn = x;
  world->all_reduce(std::span<T>(x));
  world->all_reduce(std::span<T>(mx), ReduceOp::max);
  world->all_reduce(std::span<T>(mn), ReduceOp::min);
  for (size_t i = 0; i < n; ++i) {
    T s = 0, hi = value<T>(0, i), lo = value<T>(0, i);
    for (int r = 0; r < N; ++r)
      s += value<T>(r, i), hi = std::max(hi, value<T>(r, i)), lo = std::min(lo, value<T>(r, i));
    ASSERT_EQ(x[i], s) << "sum at " << i;
    ASSERT_EQ(mx[i], hi) << "max at " << i;
    ASSERT_EQ(mn[i], lo) << "min at " << i;
  }
}

TEST(MpiComm, AllReduceIsExact) {
  for (size_t n : {size_t(1), size_t(15), size_t(1000003)}) {
    check_all_reduce<float>(n);
    check_all_reduce<double>(n);
    check_all_reduce<int64_t>(n);
  }
}

TEST(MpiComm, ReduceScatterAndAllGatherAreExact) {
  const int N = world->size(), me = world->rank();
  for (size_t block : {size_t(1), size_t(333), size_t(65537)}) {
    std::vector<float> in(block * size_t(N)), out(block);
    for (size_t i = 0; i < in.size(); ++i) in[i] = value<float>(me, i);
    world->reduce_scatter(std::span<const float>(in), std::span<float>(out));
    for (size_t i = 0; i < block; ++i) {
      float s = 0;
      for (int r = 0; r < N; ++r) s += value<float>(r, size_t(me) * block + i);
      ASSERT_EQ(out[i], s) << "reduce_scatter block " << me << " element " << i;
    }
    std::vector<float> mine(block), all(block * size_t(N));
    for (size_t i = 0; i < block; ++i) mine[i] = value<float>(me, i);
    world->all_gather(std::span<const float>(mine), std::span<float>(all));
    for (int r = 0; r < N; ++r)
      for (size_t i = 0; i < block; ++i) ASSERT_EQ(all[size_t(r) * block + i], value<float>(r, i)) << "from rank " << r;
  }
}

TEST(MpiComm, BroadcastFromEveryRoot) {
  for (int root = 0; root < world->size(); ++root) {
    std::vector<int32_t> x(1001);
    for (size_t i = 0; i < x.size(); ++i) x[i] = value<int32_t>(world->rank(), i);
    world->broadcast(std::span<int32_t>(x), root);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], value<int32_t>(root, i));
  }
}

TEST(MpiComm, CountsTheRingVolumes) {
  const int N = world->size();
  world->reset_counters();
  std::vector<float> a(N * 1200), b(1200);
  world->all_reduce(std::span<float>(a));
  EXPECT_EQ(world->counters().elements_sent, uint64_t(2.0 * (N - 1) / N * double(a.size()) + 0.5));
  world->reset_counters();
  world->reduce_scatter(std::span<const float>(a), std::span<float>(b));
  EXPECT_EQ(world->counters().elements_sent, uint64_t(N - 1) * 1200);
  world->reset_counters();
  world->all_gather(std::span<const float>(b), std::span<float>(a));
  EXPECT_EQ(world->counters().elements_sent, uint64_t(N - 1) * 1200);
  EXPECT_EQ(world->counters().calls, 1u);
}

// Each rank's share of its node (all ranks on one simulated node of 8 GiB and 8 CPUs): CPUs
// and host RAM divided, never oversubscribed, and its NVMe path filled in.
TEST(NodeShare, DividesTheNodeAmongItsRanks) {
  const int N = world->size();
  const Topology real = world->topology();
  world->set_topology(Topology::blocks(N, N));
  const size_t GiB = size_t(1) << 30;
  const NodeShare s = node_share(world, 0, "/nvme/{host}/r{rank}-l{local_rank}-n{node}", 8 * GiB, 8);
  EXPECT_EQ(s.local_size, N);
  EXPECT_EQ(s.local_rank, world->rank());
  EXPECT_EQ(s.cpus, 8 / N);
  EXPECT_EQ(s.host_mem, 8 * GiB / 10 * 9 / size_t(N));
  EXPECT_EQ(s.nvme_path, "/nvme/" + world->host() + "/r" + std::to_string(world->rank()) + "-l" +
                             std::to_string(world->rank()) + "-n0");
  EXPECT_EQ(node_share(world, 8 * GiB / size_t(N), "", 8 * GiB, 8).host_mem, 8 * GiB / size_t(N));
  if (N > 1) {
    try {
      node_share(world, 8 * GiB / size_t(N) + 1, "", 8 * GiB, 8);
      ADD_FAILURE() << "the node's RAM was oversubscribed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("more than its 8.00 GiB of RAM"), std::string::npos) << e.what();
    }
  }
  world->set_topology(real);
}

TEST(MpiComm, BlockSizesAreChecked) {
  std::vector<float> a(7), b(3);
  EXPECT_THROW(world->reduce_scatter(std::span<const float>(a), std::span<float>(b)), Error);  // 7 != N·3
  EXPECT_THROW(world->all_gather(std::span<const float>(b), std::span<float>(a)), Error);
}

WORLD_SIZES(2, 3, 4)
TEST(MpiComm, MismatchedCollectiveIsAnErrorOnEveryRank) {
  if (world->size() == 1) GTEST_SKIP() << "a mismatch needs two ranks";
  std::vector<float> x(10 + size_t(world->rank()));  // each rank a different count
  try {
    world->all_reduce(std::span<float>(x));
    FAIL() << "mismatched all_reduce returned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collective mismatch"), std::string::npos) << e.what();
  }
  world->barrier();  // and the communicator is still usable
}

WORLD_SIZES(2, 3, 4)
TEST(MpiComm, MissingRankTimesOutWithAMessage) {
  if (world->size() == 1) GTEST_SKIP() << "a missing rank needs two ranks";
  MpiComm late({1.0, false});  // its own communicator, 1 s timeout
  std::vector<float> x(16, 1.0f);
  if (world->rank() != 0) {
    try {
      late.all_reduce(std::span<float>(x));
      FAIL() << "all_reduce without rank 0 returned";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("did not complete within 1 s"), std::string::npos) << m;
      EXPECT_NE(m.find("all_reduce of 16 f32"), std::string::npos) << m;
      EXPECT_NE(m.find("rank " + std::to_string(world->rank())), std::string::npos) << m;
    }
  }
  world->barrier();
  // Rank 0 joins late so the abandoned operations complete before MPI shuts down.
  if (world->rank() == 0) late.all_reduce(std::span<float>(x));
  world->barrier();
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::test::run_mpi_tests(argc, argv, strata::world, 60.0); }
