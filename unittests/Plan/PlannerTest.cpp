//===- PlannerTest.cpp - The planner on hand-computable models -------------===//
//
// Synthetic models of uniform layers on a 1 TFLOP/s "GPU" so that one layer's
// F, B and W of one sequence take exactly 1 s each.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Planner.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace pipeforge;
using namespace pipeforge::plan;
using sched::ScheduleKind;

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

ModelCosts uniformModel(int layers, double params = 0, double stash = 0,
                        double outputBytes = 0) {
  ModelCosts m;
  m.name = "uniform";
  m.seqLen = 1000;
  for (int i = 0; i < layers; ++i) {
    LayerCost l;
    l.fwdFlops = l.bwdInputFlops = l.bwdWeightFlops = 1e12;
    l.params = params;
    l.stashBytes = stash;
    l.weightStashBytes = stash / 2;
    l.outputBytes = outputBytes;
    m.layers.push_back(l);
  }
  return m;
}

Cluster cluster(int gpus, double memGiB, int perNode = 8) {
  Cluster c;
  c.name = "test";
  c.gpus = gpus;
  c.gpusPerNode = perNode;
  c.memoryGiB = memGiB;
  c.peakTflops = 1;
  c.efficiency = 1;
  c.intraNodeGBps = 100;
  c.interNodeGBps = 10;
  return c;
}

PlanOptions options(int64_t globalBatch,
                    std::vector<ScheduleKind> kinds = {}) {
  PlanOptions o;
  o.globalBatch = globalBatch;
  o.microbatchSizes = {1};
  o.schedules = std::move(kinds);
  return o;
}
} // namespace

TEST(Planner, OneFOneBTimeAndMemoryByHand) {
  // p = 4 stages of one layer, m = 8: makespan (m + p - 1)(F + B + W).
  ModelCosts m = uniformModel(4, /*params=*/1e6, /*stash=*/1e9);
  auto c = evaluate(m, cluster(4, 1000), options(8), ScheduleKind::OneFOneB,
                    4, 1, Layout::PipelineInNode);
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_DOUBLE_EQ(c->pipelineTime, (8 + 3) * 3.0);
  EXPECT_DOUBLE_EQ(c->dpTime, 0);
  EXPECT_DOUBLE_EQ(c->stepTime, c->pipelineTime);
  // Rank 0 holds p M_B = 4 GB of activations at its peak.
  EXPECT_DOUBLE_EQ(c->activationBytes, 4e9);
  EXPECT_DOUBLE_EQ(c->paramBytes, 1e6 * 16);
  EXPECT_DOUBLE_EQ(c->memoryBytes, 4e9 + 16e6);
  EXPECT_NEAR(c->bubbleRate, 1 - 8.0 * 3 / 33, 1e-12);
  EXPECT_EQ(c->layerSplit, (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(c->dp, 1);
  EXPECT_EQ(c->microbatches, 8);
}

TEST(Planner, DataParallelAllReduceScalesAsRing) {
  // Pure data parallelism: 2(d-1)/d * params * 4 bytes / 100 GB/s.
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  for (int d : {2, 4, 8}) {
    PlanOptions o = options(8);
    auto c = evaluate(m, cluster(d, 1000), o, ScheduleKind::OneFOneB, 1, 1,
                      Layout::PipelineInNode);
    ASSERT_TRUE(c.isOk()) << c.message();
    EXPECT_NEAR(c->dpTime, 2.0 * (d - 1) / d * 4e9 * 4 / 100e9, 1e-12) << d;
    // Compute per GPU: 8/d sequences x 4 layers x 3 s.
    EXPECT_NEAR(c->pipelineTime, 8.0 / d * 12, 1e-9);
    EXPECT_FALSE(c->dpInterNode);
  }
  // Across nodes (2 per node) the ring runs at the inter-node bandwidth.
  auto c = evaluate(m, cluster(4, 1000, 2), options(8), ScheduleKind::OneFOneB,
                    1, 1, Layout::PipelineInNode);
  ASSERT_TRUE(c.isOk());
  EXPECT_TRUE(c->dpInterNode);
  EXPECT_NEAR(c->dpTime, 1.5 * 16e9 / 10e9, 1e-12);
}

TEST(Planner, LayoutsDecideWhichLinkIsInterNode) {
  ModelCosts m = uniformModel(8, 1e6, 1e6, /*outputBytes=*/1e9);
  Cluster cl = cluster(16, 1000, 8); // 2 nodes of 8
  auto a = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 4, 1,
                    Layout::PipelineInNode);
  auto b = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 4, 1,
                    Layout::DataInNode);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_FALSE(a->ppInterNode);
  EXPECT_TRUE(a->dpInterNode);
  EXPECT_TRUE(b->ppInterNode);
  EXPECT_FALSE(b->dpInterNode);
  EXPECT_DOUBLE_EQ(a->commTime, 1e9 / 100e9);
  EXPECT_DOUBLE_EQ(b->commTime, 1e9 / 10e9);
}

TEST(Planner, ZeroBubbleBeatsOneFOneBWithoutCommAndMemoryLimits) {
  ModelCosts m = uniformModel(8); // no bytes anywhere: T_comm = 0
  PlanOptions o = options(16, {ScheduleKind::OneFOneB, ScheduleKind::ZBH1,
                               ScheduleKind::ZBH2, ScheduleKind::ZBV});
  o.pipelineDegrees = {4};
  auto r = plan::plan(m, cluster(4, 1e6), o);
  ASSERT_TRUE(r.isOk()) << r.message();
  ASSERT_FALSE(r->ranked.empty());
  const Candidate &best = r->ranked.front();
  EXPECT_NE(best.kind, ScheduleKind::OneFOneB);
  double oneF1B = -1;
  for (const Candidate &c : r->ranked)
    if (c.kind == ScheduleKind::OneFOneB)
      oneF1B = c.stepTime;
  ASSERT_GT(oneF1B, 0);
  EXPECT_LT(best.stepTime, oneF1B);
  // 1F1B: (m + p - 1) x 2 layers x 3 s.
  EXPECT_DOUBLE_EQ(oneF1B, (16 + 3) * 6.0);
  // ZB-V with T_F = T_B = T_W has no bubble in the steady state.
  EXPECT_LT(best.bubbleRate, 0.2);
}

TEST(Planner, RejectsSetupsOverMemory) {
  // 1e9 params per layer x 16 bytes: 16 GB of model state per layer. On
  // 40 GiB GPUs a rank can hold at most 2 layers.
  ModelCosts m = uniformModel(4, /*params=*/1e9, /*stash=*/1e8);
  PlanOptions o = options(8);
  o.microbatchSizes = {1, 2};
  Cluster cl = cluster(4, 40);
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  ASSERT_FALSE(r->ranked.empty());
  ASSERT_FALSE(r->overMemory.empty());
  for (const Candidate &c : r->ranked) {
    EXPECT_TRUE(c.fits);
    EXPECT_LE(c.memoryBytes, cl.usableBytes());
    EXPECT_GE(c.pp, 2); // pp = 1 needs 64 GB of state
  }
  for (const Candidate &c : r->overMemory) {
    EXPECT_FALSE(c.fits);
    EXPECT_GT(c.memoryBytes, cl.usableBytes());
  }
  // DualPipe holds two copies: two stages' state on every rank.
  auto d = evaluate(m, cl, o, ScheduleKind::DualPipe, 2, 1,
                    Layout::PipelineInNode);
  ASSERT_TRUE(d.isOk()) << d.message();
  EXPECT_DOUBLE_EQ(d->paramBytes, 4 * 16e9);
  EXPECT_FALSE(d->fits);
  // Reserved memory counts against the capacity.
  Cluster reserved = cl;
  reserved.reservedGiB = 39;
  auto none = plan::plan(m, reserved, o);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.message().find("infeasible"), std::string::npos);
}

TEST(Planner, InfeasibleSaysTheSmallestNeed) {
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  auto r = plan::plan(m, cluster(4, 8), options(8));
  ASSERT_FALSE(r.isOk());
  const std::string &msg = r.message();
  EXPECT_NE(msg.find("no setup fits in memory"), std::string::npos) << msg;
  // The smallest need: 1 layer per rank, 16e9 bytes = 14.90 GiB.
  EXPECT_NE(msg.find("14.90 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("8.00 GiB"), std::string::npos) << msg;
}

TEST(Planner, NothingFormableSaysWhy) {
  ModelCosts m = uniformModel(4);
  PlanOptions o = options(3); // 3 sequences on dp = 2
  o.pipelineDegrees = {2};
  auto r = plan::plan(m, cluster(4, 80), o);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.message().find("not a multiple of dp x b"), std::string::npos)
      << r.message();
}

TEST(Planner, Deterministic) {
  ModelCosts m = uniformModel(12, 1e8, 1e8, 1e7);
  for (int i = 0; i < 12; i += 5)
    m.layers[i].fwdFlops *= 2; // uneven layers
  Cluster cl = cluster(16, 24, 8);
  PlanOptions o = options(64);
  o.microbatchSizes = {1, 2, 4};
  auto a = plan::plan(m, cl, o);
  auto b = plan::plan(m, cl, o);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(formatJson(*a, m, cl, o), formatJson(*b, m, cl, o));
  EXPECT_EQ(formatTable(*a, m, cl, o), formatTable(*b, m, cl, o));
  // Sorted by step time.
  for (size_t i = 1; i < a->ranked.size(); ++i)
    EXPECT_LE(a->ranked[i - 1].stepTime, a->ranked[i].stepTime + 1e-9);
  EXPECT_NE(formatTable(*a, m, cl, o).find("recommended: "), std::string::npos);
}

TEST(Planner, ScheduleRulesAreSkippedWithReasons) {
  ModelCosts m = uniformModel(6);
  PlanOptions o = options(8, {ScheduleKind::ZBV, ScheduleKind::DualPipe});
  o.pipelineDegrees = {4};
  auto r = plan::plan(m, cluster(4, 80), o);
  // ZB-V on 4 ranks needs 8 stages (6 layers); DualPipe needs >= 8 total
  // microbatches: both fine or skipped with a reason naming the rule.
  ASSERT_TRUE(r.isOk()) << r.message();
  bool zbvReason = false;
  for (const std::string &s : r->skipped)
    zbvReason |= s.find("zbv with pp=4 needs 8 stages") != std::string::npos;
  EXPECT_TRUE(zbvReason);
  ASSERT_EQ(r->ranked.size(), 1u);
  EXPECT_EQ(r->ranked[0].kind, ScheduleKind::DualPipe);
}

TEST(ClusterJson, ParsesTheSchema) {
  auto c = parseCluster(R"({"name": "x", "gpus": 16, "gpus_per_node": 8,
      "memory_gb": 80, "reserved_memory_gb": 4, "peak_tflops": 989,
      "efficiency": 0.5, "intra_node_gb_per_s": 450,
      "inter_node_gb_per_s": 50})");
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_EQ(c->gpus, 16);
  EXPECT_EQ(c->numNodes(), 2);
  EXPECT_DOUBLE_EQ(c->usableBytes(), 76 * kGiB);
  EXPECT_DOUBLE_EQ(c->flopsPerSecond(), 989e12 * 0.5);
  // One node: no inter-node bandwidth needed, efficiency defaults to 1.
  auto one = parseCluster(R"({"gpus": 8, "gpus_per_node": 8, "memory_gb": 80,
      "peak_tflops": 989, "intra_node_gb_per_s": 450})");
  ASSERT_TRUE(one.isOk()) << one.message();
  EXPECT_DOUBLE_EQ(one->efficiency, 1);
}

TEST(ClusterJson, ErrorsNameTheKey) {
  struct Case {
    const char *text, *expected;
  } cases[] = {
      {R"({"gpus": 8, "gpus_per_node": 8, "peak_tflops": 1,
           "intra_node_gb_per_s": 1})",
       "missing key 'memory_gb'"},
      {R"({"gpus": "8", "gpus_per_node": 8, "memory_gb": 80,
           "peak_tflops": 1, "intra_node_gb_per_s": 1})",
       "key 'gpus': expected an integer"},
      {R"({"gpus": 8, "gpus_per_node": 8, "memory_gb": -1,
           "peak_tflops": 1, "intra_node_gb_per_s": 1})",
       "key 'memory_gb': expected a positive number"},
      {R"({"gpus": 8, "gpus_per_node": 8, "memory_gb": 80, "memory_GB": 80,
           "peak_tflops": 1, "intra_node_gb_per_s": 1})",
       "unknown key 'memory_GB'"},
      {R"({"gpus": 8, "gpus_per_node": 8, "memory_gb": 80, "efficiency": 2,
           "peak_tflops": 1, "intra_node_gb_per_s": 1})",
       "key 'efficiency'"},
      {R"({"gpus": 16, "gpus_per_node": 8, "memory_gb": 80,
           "peak_tflops": 1, "intra_node_gb_per_s": 1})",
       "missing key 'inter_node_gb_per_s'"},
      {R"({"gpus": 12, "gpus_per_node": 8, "memory_gb": 80,
           "peak_tflops": 1, "intra_node_gb_per_s": 1,
           "inter_node_gb_per_s": 1})",
       "key 'gpus': 12 GPUs do not fill whole nodes"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"gpus": )", "invalid JSON"},
  };
  for (const Case &c : cases) {
    auto r = parseCluster(c.text);
    ASSERT_FALSE(r.isOk()) << c.expected;
    EXPECT_NE(r.message().find(c.expected), std::string::npos)
        << r.message() << " vs " << c.expected;
  }
}
