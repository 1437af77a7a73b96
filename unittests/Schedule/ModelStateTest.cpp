//===- ModelStateTest.cpp - Model state bytes per rank under ZeRO ---------===//

#include "pipeforge/Schedule/ModelState.h"

#include <gtest/gtest.h>

using namespace pipeforge::sched;

namespace {

TEST(ModelState, Shards) {
  EXPECT_EQ(zeroShards(1, 1), 1);
  EXPECT_EQ(zeroShards(2, 1), 2);
  EXPECT_EQ(zeroShards(2, 2), 4);
  EXPECT_EQ(zeroShards(0, 0), 1);
}

// benchmarks/model_state.py's model: each part params / shards from its
// level on (float32 values and gradients, AdamW's two moments).
TEST(ModelState, HeldBetweenSteps) {
  const double p = 1000;
  ModelStateBytes z0 = modelStateHeld(p, 0, 4);
  EXPECT_DOUBLE_EQ(z0.params, 4000);
  EXPECT_DOUBLE_EQ(z0.grads, 4000);
  EXPECT_DOUBLE_EQ(z0.optimizer, 8000);
  EXPECT_DOUBLE_EQ(z0.total(), 16000);
  ModelStateBytes z1 = modelStateHeld(p, 1, 4);
  EXPECT_DOUBLE_EQ(z1.optimizer, 2000);
  EXPECT_DOUBLE_EQ(z1.grads, 4000);
  ModelStateBytes z2 = modelStateHeld(p, 2, 4);
  EXPECT_DOUBLE_EQ(z2.grads, 1000);
  EXPECT_DOUBLE_EQ(z2.params, 4000);
  ModelStateBytes z3 = modelStateHeld(p, 3, 4);
  EXPECT_DOUBLE_EQ(z3.params, 1000);
  EXPECT_DOUBLE_EQ(z3.total(), 4000);
}

// At the step's peak the gradients are whole, and under ZeRO-3 the
// gathered stages count whole.
TEST(ModelState, AtThePeak) {
  const double p = 1000;
  EXPECT_DOUBLE_EQ(modelStateAtPeak(p, 0, 2, p).total(), 16000);
  EXPECT_DOUBLE_EQ(modelStateAtPeak(p, 1, 2, p).total(), 12000);
  EXPECT_DOUBLE_EQ(modelStateAtPeak(p, 2, 2, p).total(), 12000);
  ModelStateBytes z3 = modelStateAtPeak(p, 3, 2, p);
  EXPECT_DOUBLE_EQ(z3.params, 4000);
  EXPECT_DOUBLE_EQ(z3.grads, 4000);
  EXPECT_DOUBLE_EQ(z3.optimizer, 4000);
  // Half of the parameters gathered at the peak: the own shard (1/2) and
  // the other half of that half.
  EXPECT_DOUBLE_EQ(modelStateAtPeak(p, 3, 2, p / 2).params, 4 * (500 + 250));
  // Nothing gathered: the shard only; more than the rank holds: all of it.
  EXPECT_DOUBLE_EQ(modelStateAtPeak(p, 3, 4, 0).params, 1000);
  EXPECT_DOUBLE_EQ(modelStateAtPeak(p, 3, 4, 2 * p).params, 4000);
  // One shard: nothing to shard.
  EXPECT_DOUBLE_EQ(modelStateAtPeak(p, 3, 1, 0).total(), 16000);
}

TEST(ModelState, OtherBytesPerParam) {
  StateBytesPerParam mixed{2, 2, 12}; // bf16 values and gradients
  EXPECT_DOUBLE_EQ(modelStateHeld(10, 0, 1, mixed).total(), 160);
  EXPECT_DOUBLE_EQ(modelStateHeld(10, 1, 2, mixed).optimizer, 60);
}

} // namespace
