// main() for GoogleTest binaries run under mpirun: one MpiComm for the tests, and a
// failure on any rank fails every rank's exit code.
#pragma once
#include <gtest/gtest.h>

#include "comm/mpi_comm.h"

// The world sizes a case runs at under ctest, on the line before its TEST (tests/CMakeLists.txt
// reads it from the source): WORLD_SIZES(1) for a case whose outcome cannot depend on the
// rank count, WORLD_SIZES(2, 3, 4) for one that needs several ranks. A case without it runs at
// 1, 2, 3 and 4 ranks. Run by hand under another -np, a case still runs.
#define WORLD_SIZES(...)

namespace strata::test {

inline int run_mpi_tests(int argc, char** argv, MpiComm*& world, double timeout_s) {
  ::testing::InitGoogleTest(&argc, argv);
  MpiComm comm({timeout_s, true});
  world = &comm;
  const int rc = RUN_ALL_TESTS();
  int32_t worst = rc;
  comm.all_reduce(std::span<int32_t>(&worst, 1), ReduceOp::max);
  world = nullptr;
  return worst;
}

}  // namespace strata::test
