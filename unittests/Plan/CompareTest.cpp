//===- CompareTest.cpp - Node-limited routing and --compare by hand -------===//
//
// Node-limited all-to-all rows (DeepSeek-V3's dispatch), the ep-in-node
// layout, DualPipe's second parameter copy and the schedule comparison, on
// synthetic models whose numbers can be worked out by hand (a 1 TFLOP/s
// "GPU": one layer's F, B and W of one sequence take 1 s each).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Compare.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace pipeforge;
using namespace pipeforge::plan;
using sched::ScheduleKind;

namespace {
/// `layers` moe blocks of 1e6 parameters, 0.8e6 of them 8 routed experts
/// (top 8 per token); one all-to-all moves 1 GB per sequence (8 rows of
/// 125 MB).
ModelCosts moeModel(int layers, int groups = 0, int groupsPerToken = 0) {
  ModelCosts m;
  m.name = "moe";
  m.seqLen = 1000;
  for (int i = 0; i < layers; ++i) {
    LayerCost l;
    l.kind = LayerKind::Block;
    l.fwdFlops = l.bwdInputFlops = l.bwdWeightFlops = 1e12;
    l.params = 1e6;
    l.expertParams = 0.8e6;
    l.routedBytes = 1e9;
    l.topK = 8;
    l.routingGroups = groups;
    l.groupsPerToken = groupsPerToken;
    m.layers.push_back(l);
  }
  m.shape.hidden = 16;
  m.shape.heads = m.shape.kvHeads = 8;
  m.shape.ffn = 64;
  m.shape.vocab = 64;
  m.shape.experts = 16;
  return m;
}

Cluster cluster(int gpus) {
  Cluster c;
  c.name = "test";
  c.gpus = gpus;
  c.gpusPerNode = 8;
  c.memoryGiB = 1000;
  c.peakTflops = 1;
  c.efficiency = 1;
  c.intraNodeGBps = 100;
  c.interNodeGBps = 10;
  return c;
}

PlanOptions options(int64_t globalBatch) {
  PlanOptions o;
  o.globalBatch = globalBatch;
  o.microbatchSizes = {1};
  return o;
}

SetupOptions expertSetup(int ep, int zero = 0) {
  SetupOptions s;
  s.ep = ep;
  s.zero = zero;
  return s;
}
} // namespace

TEST(PlannerNodeLimited, RowsByHand) {
  // DeepSeek-V3: top 8 of 256 experts, an expert group of 64 GPUs on 8
  // nodes, at most 4 nodes per token. The 4 nodes are the own one with
  // probability 4/8: 3.5 remote nodes, one row over InfiniBand each; of the
  // 8 expert rows 7/8 land on another GPU than the one they arrive at and
  // cross NVLink.
  DispatchRows ds = nodeLimitedRows(8, 8, 8, 4);
  EXPECT_DOUBLE_EQ(ds.network, 3.5);
  EXPECT_DOUBLE_EQ(ds.nvlink, 7);
  // Without the limit: the distinct remote nodes of 8 uniform experts,
  // 7 (1 - (7/8)^8) = 4.595 (and not 8 x 7/8 = 7 rows, as without
  // deduplication).
  DispatchRows free = nodeLimitedRows(8, 8, 8, 0);
  EXPECT_NEAR(free.network, 7 * (1 - std::pow(7.0 / 8, 8)), 1e-12);
  EXPECT_NEAR(free.network, 4.5947, 1e-4);
  // A limit above the expected distinct nodes does not bind: top 2 over 16
  // nodes of 4 reach 15 (1 - (15/16)^2) = 1.816 remote nodes.
  DispatchRows two = nodeLimitedRows(2, 16, 4, 4);
  EXPECT_NEAR(two.network, 15 * (1 - std::pow(15.0 / 16, 2)), 1e-12);
  EXPECT_DOUBLE_EQ(two.nvlink, 2 * 3.0 / 4);
  // One node: nothing crosses the network.
  DispatchRows one = nodeLimitedRows(8, 1, 8, 4);
  EXPECT_DOUBLE_EQ(one.network, 0);
  EXPECT_DOUBLE_EQ(one.nvlink, 7);

  // The node limit from group-limited routing: 8 groups, 4 per token.
  EXPECT_EQ(nodeLimit(8, 4, 8), 4);   // a group per node
  EXPECT_EQ(nodeLimit(8, 4, 16), 8);  // a group on 2 nodes
  EXPECT_EQ(nodeLimit(8, 4, 2), 2);   // 4 groups per node: both nodes
  EXPECT_EQ(nodeLimit(8, 4, 64), 32); // pp-in-node: a member per node
  EXPECT_EQ(nodeLimit(0, 4, 8), 0);   // not group-limited
}

TEST(PlannerNodeLimited, AllToAllTimeByHand) {
  // 32 GPUs (4 nodes), p = 1, d = 32, e = 16: the expert group is 16 of
  // the 32 data-parallel ranks, m = 1.
  Cluster cl = cluster(32);
  // Routing over 2 groups, 1 per token: with the group on 2 nodes (ep-in-
  // node: the expert ranks fastest), each token reaches one node.
  ModelCosts limited = moeModel(4, 2, 1);
  auto c = evaluate(limited, cl, options(32), ScheduleKind::OneFOneB, 1, 1,
                    Layout::ExpertInNode, expertSetup(16));
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_EQ(c->epNodes, 2);
  EXPECT_EQ(c->epNodeLimit, 1);
  // Per all-to-all: 0.5 remote rows of 125 MB over 10 GB/s = 6.25 ms, 7
  // rows over NVLink at 100 GB/s = 8.75 ms, at once: 8.75 ms. F and B
  // dispatch and combine: 4 per layer, 4 layers, one microbatch.
  EXPECT_NEAR(c->epCommTime, 4 * 4 * 8.75e-3, 1e-9);

  // The same layout without group-limited routing: 8/16 of the 1 GB over
  // the network at 10 GB/s = 50 ms an all-to-all.
  ModelCosts plain = moeModel(4);
  auto p = evaluate(plain, cl, options(32), ScheduleKind::OneFOneB, 1, 1,
                    Layout::ExpertInNode, expertSetup(16));
  ASSERT_TRUE(p.isOk()) << p.message();
  EXPECT_EQ(p->epNodes, 2);
  EXPECT_EQ(p->epNodeLimit, 0);
  EXPECT_NEAR(p->epCommTime, 4 * 4 * 50e-3, 1e-9);

  // dp-in-node puts the members d/e = 2 GPUs apart: 4 per node, 4 nodes,
  // 2 of them per routing group, so a token reaches 2 nodes: 2 x 3/4 = 1.5
  // remote rows (18.75 ms) and 8 x 3/4 = 6 rows over NVLink (7.5 ms).
  auto dpIn = evaluate(limited, cl, options(32), ScheduleKind::OneFOneB, 1,
                       1, Layout::DataInNode, expertSetup(16));
  ASSERT_TRUE(dpIn.isOk()) << dpIn.message();
  EXPECT_EQ(dpIn->epNodes, 4);
  EXPECT_EQ(dpIn->epNodeLimit, 2);
  EXPECT_NEAR(dpIn->epCommTime, 4 * 4 * 18.75e-3, 1e-9);
}

TEST(PlannerNodeLimited, ExpertInNodeIsSweptOnlyWhenAsked) {
  // 64 GPUs, p = 2, d = 32, e = 16: pp-in-node and dp-in-node put 4
  // members of a group on a node (each token then reaches 2 nodes),
  // ep-in-node 8 (one node per token).
  Cluster cl = cluster(64);
  ModelCosts m = moeModel(4, 2, 1);
  PlanOptions o = options(32);
  o.schedules = {ScheduleKind::OneFOneB};
  o.pipelineDegrees = {2};
  o.tensorDegrees = {1};
  o.expertDegrees = {16};
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  for (const Candidate &c : r->ranked)
    EXPECT_NE(c.layout, Layout::ExpertInNode);
  o.layouts = {Layout::PipelineInNode, Layout::DataInNode,
               Layout::ExpertInNode};
  r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  EXPECT_EQ(r->ranked.front().layout, Layout::ExpertInNode);
  Layout l;
  EXPECT_TRUE(parseLayout("ep-in-node", l));
  EXPECT_EQ(l, Layout::ExpertInNode);
  EXPECT_FALSE(parseLayout("ep", l));
}

TEST(PlannerCompare, DualPipeSecondCopyByHand) {
  // 4 moe layers, p = 2, d = 4, e = 4 on one node: a stage is 2 layers of
  // 0.2e6 dense + 0.8e6 / 4 expert parameters = 0.8e6 parameters, 16
  // bytes each without ZeRO.
  ModelCosts m = moeModel(4);
  m.shape.experts = 8;
  Cluster cl = cluster(8);
  auto dp = evaluate(m, cl, options(64), ScheduleKind::DualPipe, 2, 1,
                     Layout::PipelineInNode, expertSetup(4));
  ASSERT_TRUE(dp.isOk()) << dp.message();
  EXPECT_DOUBLE_EQ(dp->secondCopyParams, 0.8e6);
  EXPECT_DOUBLE_EQ(dp->secondCopyBytes, 0.8e6 * 16);
  // ZeRO-1 with e = 2 (2 replicas): the optimizer state halves over the
  // replicas and again over the two ranks that hold the copies (the pair
  // splits it, as pipeforge-run --zero 1 does):
  // 2 x (0.2e6 + 0.4e6) x (4 + 12 / 2 / 2).
  auto z = evaluate(m, cl, options(64), ScheduleKind::DualPipe, 2, 1,
                    Layout::PipelineInNode, expertSetup(2, 1));
  ASSERT_TRUE(z.isOk()) << z.message();
  EXPECT_DOUBLE_EQ(z->secondCopyBytes, 1.2e6 * (4 + 12.0 / 2 / 2));
  // A dense model pays its whole stage: 2 layers of 1e6.
  ModelCosts dense = moeModel(4);
  for (LayerCost &l : dense.layers) {
    l.expertParams = l.routedBytes = 0;
    l.topK = 0;
  }
  dense.shape.experts = 0;
  auto d = evaluate(dense, cl, options(64), ScheduleKind::DualPipe, 2, 1,
                    Layout::PipelineInNode, expertSetup(1));
  ASSERT_TRUE(d.isOk()) << d.message();
  EXPECT_DOUBLE_EQ(d->secondCopyBytes, 2e6 * 16);
  // One copy: nothing.
  auto one = evaluate(m, cl, options(64), ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, expertSetup(4));
  ASSERT_TRUE(one.isOk());
  EXPECT_DOUBLE_EQ(one->secondCopyBytes, 0);
}

TEST(PlannerCompare, SchedulesAtOneSetup) {
  ModelCosts m = moeModel(4);
  m.shape.experts = 8;
  Cluster cl = cluster(8);
  PlanOptions o = options(64);
  auto base = evaluate(m, cl, o, ScheduleKind::DualPipe, 2, 1,
                       Layout::PipelineInNode, expertSetup(4));
  ASSERT_TRUE(base.isOk());
  Comparison cmp = compareSchedules(m, cl, o, *base, "the explained setup");
  ASSERT_EQ(cmp.rows.size(), 4u);
  EXPECT_EQ(cmp.rows[0].kind, ScheduleKind::DualPipe);
  EXPECT_EQ(cmp.rows[2].kind, ScheduleKind::OneFOneB);
  for (const ScheduleRow &r : cmp.rows) {
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.setup.pp, 2);
    EXPECT_EQ(r.setup.ep, 4);
  }
  // The base's own schedule is the base.
  EXPECT_DOUBLE_EQ(cmp.rows[0].setup.stepTime, base->stepTime);
  // 1F1B pays its all-to-alls in full; DualPipe hides most of them.
  EXPECT_GT(cmp.rows[2].setup.epCommTime, cmp.rows[0].setup.epCommTime);
  // GPU-hours per million tokens: 8 GPUs x step / 3600 per 64 x 1000
  // tokens.
  const Candidate &oneF = cmp.rows[2].setup;
  EXPECT_NEAR(gpuHoursPerMillionTokens(oneF, cl, m, o),
              8 * oneF.stepTime / 3600 / (64 * 1000 / 1e6), 1e-12);
  EXPECT_DOUBLE_EQ(cmp.modelParams, 4e6);
  EXPECT_DOUBLE_EQ(cmp.expertParams, 3.2e6);
  std::string text = formatCompare(cmp, m, cl, o);
  EXPECT_NE(text.find("dualpipe's second parameter copy"), std::string::npos)
      << text;
  // A schedule that cannot be formed says why (ZB-V on 2 ranks needs 4
  // stages: 4 layers is enough, so use 3 layers).
  ModelCosts three = moeModel(3);
  three.shape.experts = 8;
  auto b3 = evaluate(three, cl, o, ScheduleKind::OneFOneB, 2, 1,
                     Layout::PipelineInNode, expertSetup(4));
  ASSERT_TRUE(b3.isOk());
  Comparison c3 = compareSchedules(three, cl, o, *b3, "x");
  EXPECT_FALSE(c3.rows[3].ok);
  EXPECT_NE(c3.rows[3].error.find("needs 4 stages"), std::string::npos)
      << c3.rows[3].error;
}

TEST(PlannerZero, DenseStateOverAllRanks) {
  // 8 GPUs, p = 2, d = 4, e = 2: a rank's 2 layers hold 0.4e6 dense and
  // 0.8e6 expert parameters. ZeRO-1 over the d / e = 2 replicas shards
  // both by 2; over all ranks the dense state by d = 4.
  ModelCosts m = moeModel(4);
  m.shape.experts = 8;
  Cluster cl = cluster(8);
  PlanOptions o = options(16);
  auto rep = evaluate(m, cl, o, ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, expertSetup(2, 1));
  ASSERT_TRUE(rep.isOk()) << rep.message();
  EXPECT_DOUBLE_EQ(rep->optimizerBytes, 12 * (0.4e6 + 0.8e6) / 2);
  o.zeroDenseOverAll = true;
  auto all = evaluate(m, cl, o, ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, expertSetup(2, 1));
  ASSERT_TRUE(all.isOk()) << all.message();
  EXPECT_DOUBLE_EQ(all->optimizerBytes, 12 * (0.4e6 / 4 + 0.8e6 / 2));
  EXPECT_DOUBLE_EQ(all->stepTime, rep->stepTime);
}

TEST(PlannerNodeLimited, SetRoutingGroups) {
  ModelCosts m = moeModel(2);
  ASSERT_TRUE(setRoutingGroups(m, 8, 4).isOk());
  EXPECT_EQ(m.layers[0].routingGroups, 8);
  EXPECT_EQ(m.layers[1].groupsPerToken, 4);
  // One group is no limit.
  ASSERT_TRUE(setRoutingGroups(m, 1, 1).isOk());
  EXPECT_EQ(m.layers[0].routingGroups, 0);
  EXPECT_EQ(setRoutingGroups(m, 4, 8).message(),
            "expected G,g with 1 <= g <= G, got '4,8'");
  EXPECT_EQ(setRoutingGroups(m, 3, 1).message(),
            "3 groups do not divide the 16 experts per layer");
  ModelCosts dense = moeModel(2);
  dense.shape.experts = 0;
  EXPECT_EQ(setRoutingGroups(dense, 2, 1).message(),
            "the model has no moe layers");
}
