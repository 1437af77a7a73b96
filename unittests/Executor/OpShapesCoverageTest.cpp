//===- OpShapesCoverageTest.cpp - The registry and the CPU backend agree --===//
//
// The program validator refuses a kernel whose op is not in the registry
// (rt/OpShapes.h); the CPU backend refuses one it has no adapter for.
// Both lists must be the same, or a validated program could name an op
// whose sizes nobody checked, except for the tensor-parallel collectives,
// which the executor runs itself (OpSpec::collective).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/rt/Backend.h"
#include "pipeforge/rt/OpShapes.h"

#include <gtest/gtest.h>

using namespace pipeforge::rt;

TEST(OpShapes, TableAndCpuBackendKnowTheSameOps) {
  std::vector<std::string> table;
  std::vector<std::string> executorOps;
  for (const OpSpec &s : allOpSpecs())
    (s.collective ? executorOps : table).push_back(s.name);
  EXPECT_EQ(table, cpuBackendOps()); // both sorted
  EXPECT_EQ(executorOps,
            (std::vector<std::string>{"tp_all_gather", "tp_all_reduce",
                                      "tp_copy", "tp_reduce_scatter",
                                      "vocab_parallel_cross_entropy",
                                      "vocab_parallel_cross_entropy_bwd"}));
}
