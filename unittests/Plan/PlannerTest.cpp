//===- PlannerTest.cpp - The planner on hand-computable models
//-------------===//
//
// Synthetic models of uniform layers on a 1 TFLOP/s "GPU" so that one layer's
// F, B and W of one sequence take exactly 1 s each.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Plan/Options.h"
#include "pipeforge/Plan/Planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

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

PlanOptions options(int64_t globalBatch, std::vector<ScheduleKind> kinds = {}) {
  PlanOptions o;
  o.globalBatch = globalBatch;
  o.microbatchSizes = {1};
  o.schedules = std::move(kinds);
  return o;
}

/// The gradient all-reduce after the pipeline (--overlap-grad-reduce off):
/// for the tests of its by-hand time.
PlanOptions seriesOptions(int64_t globalBatch) {
  PlanOptions o = options(globalBatch);
  o.gradOverlap = GradOverlap::Off;
  return o;
}
} // namespace

TEST(Planner, OneFOneBTimeAndMemoryByHand) {
  // p = 4 stages of one layer, m = 8: makespan (m + p - 1)(F + B + W).
  ModelCosts m = uniformModel(4, /*params=*/1e6, /*stash=*/1e9);
  auto c = evaluate(m, cluster(4, 1000), options(8), ScheduleKind::OneFOneB, 4,
                    1, Layout::PipelineInNode);
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
    PlanOptions o = seriesOptions(8);
    auto c = evaluate(m, cluster(d, 1000), o, ScheduleKind::OneFOneB, 1, 1,
                      Layout::PipelineInNode);
    ASSERT_TRUE(c.isOk()) << c.message();
    EXPECT_NEAR(c->dpTime, 2.0 * (d - 1) / d * 4e9 * 4 / 100e9, 1e-12) << d;
    // Compute per GPU: 8/d sequences x 4 layers x 3 s.
    EXPECT_NEAR(c->pipelineTime, 8.0 / d * 12, 1e-9);
    EXPECT_FALSE(c->dpInterNode);
  }
  // Across nodes (2 per node) the ring runs at the inter-node bandwidth.
  auto c = evaluate(m, cluster(4, 1000, 2), seriesOptions(8),
                    ScheduleKind::OneFOneB, 1, 1, Layout::PipelineInNode);
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
  o.zeroStages = {0}; // replicated (ZeRO-1: PlannerZero below)
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
  auto d =
      evaluate(m, cl, o, ScheduleKind::DualPipe, 2, 1, Layout::PipelineInNode);
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

//===----------------------------------------------------------------------===//
// Tensor parallelism, recomputation, ZeRO-1 and the roofline
//===----------------------------------------------------------------------===//

namespace {
/// `layers` transformer blocks (F = B = W = 1e12 FLOPs per sequence: 1 s on
/// the 1 TFLOP/s test GPU) with a known shape that allows t = 1, 2, 4, 8.
ModelCosts blockModel(int layers, double params, double stash,
                      double hiddenBytes) {
  ModelCosts m = uniformModel(layers, params, stash);
  for (LayerCost &l : m.layers) {
    l.kind = LayerKind::Block;
    l.hiddenBytes = hiddenBytes;
  }
  m.shape.hidden = 16;
  m.shape.heads = m.shape.kvHeads = 8;
  m.shape.ffn = 64;
  m.shape.vocab = 64;
  return m;
}

SetupOptions setup(int tp, Recompute rc = Recompute::None, int zero = 0) {
  SetupOptions s;
  s.tp = tp;
  s.recompute = rc;
  s.zero = zero;
  return s;
}

/// The parts of the step split add up to the step.
double splitSum(const Candidate &c) {
  return c.computeTime + c.recomputeTime + c.tpCommTime + c.epCommTime +
         c.bubbleTime + c.ppCommTime + c.dpCommTime;
}
} // namespace

TEST(PlannerTensorParallel, DividesComputeAndAddsAllReducesByHand) {
  // 4 blocks, t = 2, p = 2 (d = 1) on 4 GPUs of one node, 8 microbatches.
  ModelCosts m = blockModel(4, /*params=*/1e6, /*stash=*/1e9,
                            /*hiddenBytes=*/1e9);
  auto c = evaluate(m, cluster(4, 1000, 4), options(8), ScheduleKind::OneFOneB,
                    2, 1, Layout::PipelineInNode, setup(2));
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_EQ(c->tp, 2);
  EXPECT_EQ(c->dp, 1);
  // Per layer: F = B = W = 0.5 s; 2 all-reduces of 1 GB in F and in B, each
  // 2 (t-1)/t x 1e9 / 100 GB/s = 0.01 s. A stage (2 layers): F = B = 1.04,
  // W = 1. 1F1B: (m + p - 1)(F + B + W).
  EXPECT_NEAR(c->pipelineTime, 9 * 3.08, 1e-9);
  EXPECT_NEAR(c->computeTime, 8 * (2 * 2 * 1.5) / 2, 1e-9);
  EXPECT_NEAR(c->tpCommTime, 8 * (4 * 0.04) / 2, 1e-9);
  EXPECT_NEAR(c->bubbleTime, 3.08, 1e-9);
  EXPECT_DOUBLE_EQ(c->recomputeTime, 0);
  EXPECT_DOUBLE_EQ(c->ppCommTime, 0);
  EXPECT_NEAR(splitSum(*c), c->stepTime, 1e-9);
  // Per GPU: 2 layers x 1e6 / 2 parameters; activations 1e9 / 2 per layer,
  // rank 0 holds p = 2 microbatches of its 2 layers.
  EXPECT_DOUBLE_EQ(c->weightBytes, 1e6 * 2);
  EXPECT_DOUBLE_EQ(c->gradBytes, 1e6 * 2);
  EXPECT_DOUBLE_EQ(c->optimizerBytes, 1e6 * 12);
  EXPECT_DOUBLE_EQ(c->paramBytes, 16e6);
  EXPECT_DOUBLE_EQ(c->activationBytes, 2e9);
  // MFU: 8 sequences x 4 layers x 3e12 FLOPs / (4 GPUs x 1e12 x step).
  EXPECT_NEAR(c->mfu, 8 * 4 * 3e12 / (4 * 1e12 * 9 * 3.08), 1e-12);
}

TEST(PlannerTensorParallel, EmbeddingAndHeadCollectives) {
  // Embedding (one all-reduce in F), block (2 + 2), head (one in B), t = 2
  // on one pipeline rank: 6 all-reduces of 0.01 s per microbatch.
  ModelCosts m = blockModel(3, 0, 0, /*hiddenBytes=*/1e9);
  m.layers[0].kind = LayerKind::Embedding;
  m.layers[2].kind = LayerKind::Head;
  auto c = evaluate(m, cluster(2, 1000), options(2), ScheduleKind::OneFOneB, 1,
                    1, Layout::PipelineInNode, setup(2));
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_NEAR(c->tpCommTime, 2 * 6 * 0.01, 1e-12);
  EXPECT_NEAR(c->pipelineTime, 2 * (3 * 1.5 + 6 * 0.01), 1e-9);
}

TEST(PlannerTensorParallel, DegreesTheModelAllows) {
  ModelCosts m = blockModel(4, 1e6, 0, 0);
  Cluster cl = cluster(16, 80, 8);
  for (int t : {1, 2, 4, 8})
    EXPECT_TRUE(checkTensorDegree(m, cl, t).isOk()) << t;
  auto expectError = [&](const ModelCosts &mm, int t, const char *what) {
    Status s = checkTensorDegree(mm, cl, t);
    ASSERT_FALSE(s.isOk()) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  expectError(m, 3, "GPUs per node");
  expectError(m, 16, "GPUs per node");
  ModelCosts gqa = m;
  gqa.shape.kvHeads = 2; // grouped-query attention splits whole KV heads
  EXPECT_TRUE(checkTensorDegree(gqa, cl, 2).isOk());
  expectError(gqa, 4, "KV heads (2)");
  ModelCosts gpt2 = m;
  gpt2.shape.vocab = 50257; // the vocabulary-parallel split is unpadded
  expectError(gpt2, 2, "vocabulary");
  ModelCosts unknown = uniformModel(4);
  EXPECT_TRUE(checkTensorDegree(unknown, cl, 1).isOk());
  expectError(unknown, 2, "heads are unknown");

  // The sweep tries exactly the allowed degrees (one of each kind shown).
  PlanOptions o = options(16, {ScheduleKind::OneFOneB});
  o.pipelineDegrees = {1};
  auto r = plan::plan(gqa, cluster(8, 1000, 8), o);
  ASSERT_TRUE(r.isOk()) << r.message();
  std::set<int> tps;
  for (const Candidate &c : r->ranked)
    tps.insert(c.tp);
  EXPECT_EQ(tps, (std::set<int>{1, 2}));
}

TEST(PlannerTensorParallel, LayoutsSeeNodesOfGpusPerNodeOverT) {
  // 2 nodes of 8; with t = 4 a node holds 2 tensor-parallel groups.
  ModelCosts m = blockModel(8, 1e6, 1e6, 0);
  for (LayerCost &l : m.layers)
    l.outputBytes = 1e9;
  Cluster cl = cluster(16, 1000, 8);
  auto two = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, setup(4));
  auto four = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 4, 1,
                       Layout::PipelineInNode, setup(4));
  ASSERT_TRUE(two.isOk() && four.isOk());
  EXPECT_FALSE(two->ppInterNode);
  EXPECT_TRUE(two->dpInterNode);
  EXPECT_TRUE(four->ppInterNode);
  EXPECT_EQ(four->dp, 1);
  // Each tensor-parallel rank sends its 1/t of the boundary activation.
  EXPECT_DOUBLE_EQ(two->commTime, 1e9 / 4 / 100e9);
  EXPECT_DOUBLE_EQ(four->commTime, 1e9 / 4 / 10e9);
  EXPECT_GT(four->ppCommTime, 0);
  EXPECT_NEAR(splitSum(*four), four->stepTime, 1e-9);
  // p x t must divide the GPUs.
  EXPECT_FALSE(evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 8, 1,
                        Layout::PipelineInNode, setup(4))
                   .isOk());
}

TEST(PlannerRecompute, StashAndBackwardByHand) {
  // 2 blocks on p = 2, m = 4. Per sequence: stash 1 GB, of which 0.4 GB
  // are attention scores (the GPU attention keeps none: its B computes
  // Q K^T again, half of the core's 2e11 forward FLOPs, 0.1 s) and 0.1 GB
  // are norm and activation outputs (selective drops them and redoes them
  // in B from HBM: 2e8 bytes at 100 GB/s, 2 ms); the hidden state is 0.1 GB.
  ModelCosts m = blockModel(2, 0, /*stash=*/1e9, /*hiddenBytes=*/1e8);
  for (LayerCost &l : m.layers) {
    l.unkeptBytes = 4e8;
    l.attnCoreFlops = 2e11;
    l.selectiveBytes = 1e8;
  }
  Cluster cl = cluster(2, 1000);
  cl.memoryBandwidthGBps = 100;
  auto run = [&](Recompute rc) {
    auto c = evaluate(m, cl, options(4), ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, setup(1, rc));
    EXPECT_TRUE(c.isOk()) << c.message();
    return c.take();
  };
  // 1F1B: rank 0 holds p = 2 microbatches' stash at its peak; with
  // recomputation plus what B rematerialises of one layer.
  Candidate none = run(Recompute::None);
  EXPECT_DOUBLE_EQ(none.activationBytes, 2 * 6e8);
  EXPECT_NEAR(none.pipelineTime, 5 * 3.1, 1e-9);
  EXPECT_DOUBLE_EQ(none.recomputeTime, 0);
  Candidate sel = run(Recompute::Selective);
  EXPECT_DOUBLE_EQ(sel.activationBytes, 2 * 5e8 + 1e8);
  EXPECT_NEAR(sel.pipelineTime, 5 * 3.102, 1e-9);
  EXPECT_NEAR(sel.recomputeTime, 4 * 2 * 0.002 / 2, 1e-12);
  Candidate full = run(Recompute::Full);
  EXPECT_DOUBLE_EQ(full.activationBytes, 2 * 1e8 + 5e8);
  EXPECT_NEAR(full.pipelineTime, 5 * 4.1, 1e-9);
  EXPECT_NEAR(full.recomputeTime, 4 * 2.0 / 2, 1e-9);
  EXPECT_NEAR(splitSum(full), full.stepTime, 1e-9);
  // MFU counts the model's FLOPs only, not the recomputed ones.
  EXPECT_NEAR(full.mfu, 4 * 2 * 3e12 / (2 * 1e12 * 20.5), 1e-12);

  // A layer without those splits: selective keeps everything.
  ModelCosts f = blockModel(2, 0, 1e9, 1e8);
  auto fsel = evaluate(f, cl, options(4), ScheduleKind::OneFOneB, 2, 1,
                       Layout::PipelineInNode, setup(1, Recompute::Selective));
  ASSERT_TRUE(fsel.isOk());
  EXPECT_DOUBLE_EQ(fsel->activationBytes, 2e9);
  EXPECT_DOUBLE_EQ(fsel->recomputeTime, 0);
}

TEST(PlannerRecompute, ZeroBubbleKeepsTheWeightStash) {
  // ZB-H1 splits B and W: W needs M_W (half the stash here), which
  // recomputation rebuilds in B and keeps until W.
  ModelCosts m = blockModel(2, 0, /*stash=*/1e9, /*hiddenBytes=*/1e8);
  auto c = evaluate(m, cluster(2, 1000), options(4), ScheduleKind::ZBH1, 2, 1,
                    Layout::PipelineInNode, setup(1, Recompute::Full));
  ASSERT_TRUE(c.isOk()) << c.message();
  // At least p microbatches' inputs plus one W stash on rank 0.
  EXPECT_GE(c->activationBytes, 2 * 1e8 + 5e8);
  EXPECT_LT(c->activationBytes, 2e9);
}

TEST(PlannerZero, OneShardsTheOptimizerStateOverReplicas) {
  // Pure data parallelism on 4 GPUs: 4e9 parameters per GPU.
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  Cluster cl = cluster(4, 1000);
  auto z0 = evaluate(m, cl, options(8), ScheduleKind::OneFOneB, 1, 1,
                     Layout::PipelineInNode, setup(1, Recompute::None, 0));
  auto z1 = evaluate(m, cl, options(8), ScheduleKind::OneFOneB, 1, 1,
                     Layout::PipelineInNode, setup(1, Recompute::None, 1));
  ASSERT_TRUE(z0.isOk() && z1.isOk());
  EXPECT_DOUBLE_EQ(z0->paramBytes, 4e9 * 16);
  EXPECT_DOUBLE_EQ(z1->paramBytes, 4e9 * (4 + 12.0 / 4));
  EXPECT_DOUBLE_EQ(z1->optimizerBytes, 4e9 * 3);
  EXPECT_DOUBLE_EQ(z1->weightBytes, 4e9 * 2);
  EXPECT_DOUBLE_EQ(z1->gradBytes, 4e9 * 2);
  // No extra communication: reduce-scatter + all-gather = all-reduce.
  EXPECT_DOUBLE_EQ(z1->stepTime, z0->stepTime);
  EXPECT_DOUBLE_EQ(z1->dpTime, z0->dpTime);
  EXPECT_EQ(z1->zero, 1);

  // In the sweep ZeRO-1 wins the tie on memory; with d = 1 it is not listed.
  PlanOptions o = options(8, {ScheduleKind::OneFOneB});
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  EXPECT_EQ(r->ranked.front().zero, 1);
  for (const Candidate &c : r->ranked) {
    if (c.dp == 1) {
      EXPECT_EQ(c.zero, 0);
    }
  }
  // With ZeRO-1 the pure data-parallel setup fits a 40 GiB GPU (28 GB of
  // state) where it did not without.
  o.pipelineDegrees = {1};
  auto small = plan::plan(m, cluster(4, 40), o);
  ASSERT_TRUE(small.isOk()) << small.message();
  EXPECT_EQ(small->ranked.size(), 1u);
  EXPECT_EQ(small->ranked.front().zero, 1);
}

TEST(PlannerZero, TwoShardsTheGradientsOnlyWithoutAccumulation) {
  // 4 layers of 1e9 parameters on 4 data-parallel GPUs. With 2
  // microbatches a step the gradients accumulate: the peak holds them all
  // (pipeforge-run frees the non-owned ones after the backward), as
  // ZeRO-1. With one microbatch they leave during the backward: the shard
  // plus two layers in flight.
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  Cluster cl = cluster(4, 1000);
  auto z1 = evaluate(m, cl, options(8), ScheduleKind::OneFOneB, 1, 1,
                     Layout::PipelineInNode, setup(1, Recompute::None, 1));
  auto accum = evaluate(m, cl, options(8), ScheduleKind::OneFOneB, 1, 1,
                        Layout::PipelineInNode, setup(1, Recompute::None, 2));
  auto one = evaluate(m, cl, options(4), ScheduleKind::OneFOneB, 1, 1,
                      Layout::PipelineInNode, setup(1, Recompute::None, 2));
  ASSERT_TRUE(z1.isOk() && accum.isOk() && one.isOk());
  EXPECT_EQ(accum->microbatches, 2);
  EXPECT_DOUBLE_EQ(accum->paramBytes, z1->paramBytes);
  EXPECT_DOUBLE_EQ(accum->stepTime, z1->stepTime);
  EXPECT_EQ(accum->zero, 2);
  EXPECT_EQ(one->microbatches, 1);
  EXPECT_DOUBLE_EQ(one->gradBytes, (4e9 / 4 + 2e9) * 2);
  EXPECT_DOUBLE_EQ(one->weightBytes, 4e9 * 2);
  EXPECT_DOUBLE_EQ(one->optimizerBytes, 4e9 * 3);
  EXPECT_DOUBLE_EQ(one->paramBytes, 6e9 + 8e9 + 12e9);
  // The reduction after the pipeline keeps them all.
  PlanOptions off = options(4);
  off.gradOverlap = GradOverlap::Off;
  auto series = evaluate(m, cl, off, ScheduleKind::OneFOneB, 1, 1,
                         Layout::PipelineInNode, setup(1, Recompute::None, 2));
  ASSERT_TRUE(series.isOk());
  EXPECT_DOUBLE_EQ(series->gradBytes, 4e9 * 2);
}

TEST(PlannerZero, ThreeGathersEveryLayerPerMicrobatch) {
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  Cluster cl = cluster(4, 1000);
  auto z1 = evaluate(m, cl, options(8), ScheduleKind::OneFOneB, 1, 1,
                     Layout::PipelineInNode, setup(1, Recompute::None, 1));
  auto z3 = evaluate(m, cl, options(8), ScheduleKind::OneFOneB, 1, 1,
                     Layout::PipelineInNode, setup(1, Recompute::None, 3));
  ASSERT_TRUE(z1.isOk() && z3.isOk());
  // Weights, gradients and optimizer state over the 4 replicas, plus two
  // gathered layers (weights and unsharded gradients).
  EXPECT_DOUBLE_EQ(z3->weightBytes, (1e9 + 2e9) * 2);
  EXPECT_DOUBLE_EQ(z3->gradBytes, (1e9 + 2e9) * 2);
  EXPECT_DOUBLE_EQ(z3->optimizerBytes, 4e9 * 3);
  EXPECT_DOUBLE_EQ(z3->paramBytes, 6e9 + 6e9 + 12e9);
  // Per layer and microbatch: an all-gather (3/4 x 2e9 bytes at 100 GB/s:
  // 15 ms) in F, another in B with a reduce-scatter of 4-byte gradients
  // (30 ms); 2 microbatches, 4 layers. 1 s of compute per pass hides them;
  // there is no all-reduce after the pipeline.
  EXPECT_NEAR(z3->zeroCommTime, 2 * 4 * (0.015 + 0.015 + 0.030), 1e-9);
  EXPECT_DOUBLE_EQ(z3->zeroExposedTime, 0);
  EXPECT_DOUBLE_EQ(z3->dpTime, 0);
  EXPECT_DOUBLE_EQ(z3->dpReduceTime, 0);
  EXPECT_DOUBLE_EQ(z3->pipelineTime, z1->pipelineTime);
  EXPECT_LE(z3->stepTime, z1->stepTime);

  // On a link 1000x slower the gathers outlast the compute: the excess
  // is in the pipeline's time and in DP comm, and the parts still add up.
  Cluster slow = cl;
  slow.intraNodeGBps = 0.1;
  auto s3 = evaluate(m, slow, options(8), ScheduleKind::OneFOneB, 1, 1,
                     Layout::PipelineInNode, setup(1, Recompute::None, 3));
  ASSERT_TRUE(s3.isOk());
  // F: 15 s of gather against 1 s; B: 45 s against 2 s (B and W).
  EXPECT_NEAR(s3->zeroExposedTime, 2 * 4 * ((15 - 1) + (45 - 2)), 1e-6);
  EXPECT_NEAR(s3->dpCommTime, s3->zeroExposedTime, 1e-9);
  EXPECT_NEAR(s3->computeTime + s3->recomputeTime + s3->tpCommTime +
                  s3->epCommTime + s3->bubbleTime + s3->ppCommTime +
                  s3->dpCommTime,
              s3->stepTime, 1e-6);

  // The sweep offers ZeRO-2 and 3 only when asked for.
  PlanOptions o = options(8, {ScheduleKind::OneFOneB});
  auto plain = plan::plan(m, cl, o);
  ASSERT_TRUE(plain.isOk()) << plain.message();
  for (const Candidate &c : plain->ranked)
    EXPECT_LE(c.zero, 1);
  o.zeroStages = {0, 1, 2, 3};
  auto all = plan::plan(m, cl, o);
  ASSERT_TRUE(all.isOk()) << all.message();
  std::set<int> zeros;
  for (const Candidate &c : all->ranked)
    zeros.insert(c.zero);
  EXPECT_EQ(zeros, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(all->ranked.front().zero, 3); // no all-reduce tail
  o.zeroStages = {4};
  auto bad = plan::plan(m, cl, o);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("only 0, 1, 2 and 3 are modelled"),
            std::string::npos);
}

namespace {
/// `blockModel` with a mixture of experts in every block: of each layer's
/// 1e6 parameters 0.8e6 are 8 routed experts, and one all-to-all moves 1 GB
/// per sequence.
ModelCosts moeModel(int layers) {
  ModelCosts m = blockModel(layers, /*params=*/1e6, /*stash=*/0,
                            /*hiddenBytes=*/0);
  for (LayerCost &l : m.layers) {
    l.expertParams = 0.8e6;
    l.routedBytes = 1e9;
  }
  m.shape.experts = 8;
  return m;
}

SetupOptions expertSetup(int ep, int zero = 0) {
  SetupOptions s = setup(1, Recompute::None, zero);
  s.ep = ep;
  return s;
}
} // namespace

TEST(PlannerExpert, AllToAllsShardsAndGradientsByHand) {
  // 4 moe blocks, p = 2, d = 4, e = 4 on 8 GPUs of one node, m = 4.
  ModelCosts m = moeModel(4);
  Cluster cl = cluster(8, 1000);
  auto c = evaluate(m, cl, seriesOptions(16), ScheduleKind::OneFOneB, 2, 1,
                    Layout::PipelineInNode, expertSetup(4));
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_EQ(c->ep, 4);
  EXPECT_FALSE(c->epInterNode);
  // One all-to-all: 3/4 of 1 GB over NVLink at 100 GB/s = 7.5 ms; F and B
  // each dispatch and combine: a stage of 2 layers adds 30 ms to each.
  EXPECT_NEAR(c->pipelineTime, 5 * (2.03 + 2.03 + 2), 1e-9);
  EXPECT_NEAR(c->epCommTime, 4 * (4 * 0.03) / 2, 1e-9);
  EXPECT_NEAR(splitSum(*c), c->stepTime, 1e-9);
  // A rank holds 2 layers: 0.2e6 dense + 0.8e6 / 4 expert parameters each.
  EXPECT_DOUBLE_EQ(c->weightBytes, 2 * 0.4e6 * 2);
  EXPECT_DOUBLE_EQ(c->paramBytes, 2 * 0.4e6 * 16);
  // Dense gradients all-reduced over d = 4, the expert shards over d / e = 1
  // (each expert lives once).
  EXPECT_NEAR(c->dpTime, 2.0 * 3 / 4 * (2 * 0.2e6) * 4 / 100e9, 1e-15);

  // Without expert parallelism: no all-to-all, every expert on every rank.
  auto plain = evaluate(m, cl, seriesOptions(16), ScheduleKind::OneFOneB, 2, 1,
                        Layout::PipelineInNode, expertSetup(1));
  ASSERT_TRUE(plain.isOk()) << plain.message();
  EXPECT_DOUBLE_EQ(plain->epCommTime, 0);
  EXPECT_DOUBLE_EQ(plain->weightBytes, 2 * 1e6 * 2);
  EXPECT_NEAR(plain->dpTime, 2.0 * 3 / 4 * 2e6 * 4 / 100e9, 1e-15);

  // ZeRO-1 shards over the runtime's data-parallel group, d / e replicas:
  // with e = 2 that is 2.
  auto z = evaluate(m, cl, seriesOptions(16), ScheduleKind::OneFOneB, 2, 1,
                    Layout::PipelineInNode, expertSetup(2, 1));
  ASSERT_TRUE(z.isOk()) << z.message();
  EXPECT_DOUBLE_EQ(z->optimizerBytes, 2 * (0.2e6 + 0.4e6) * 12 / 2);
}

TEST(PlannerExpert, DualPipeHidesTheAllToAllsInItsPairs) {
  ModelCosts m = moeModel(4);
  Cluster cl = cluster(8, 1000);
  // m = 16 microbatches per pipeline of p = 2.
  auto one = evaluate(m, cl, options(64), ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, expertSetup(4));
  auto dv = evaluate(m, cl, options(64), ScheduleKind::DualPipeV, 2, 1,
                     Layout::PipelineInNode, expertSetup(4));
  ASSERT_TRUE(one.isOk() && dv.isOk());
  EXPECT_NEAR(one->epCommTime, 16 * (4 * 0.03) / 2, 1e-9);
  // DualPipeV pairs C - 2p + h + 1 of a rank's C forwards, h = 0..p-1 on
  // average 0.5: 13.5 of 16. The pairs' compute (3 s a layer) hides their
  // all-to-alls; the unpaired 2.5 / 16 stay.
  EXPECT_NEAR(dv->epCommTime, one->epCommTime * 2.5 / 16, 1e-9);
  EXPECT_NEAR(splitSum(*dv), dv->stepTime, 1e-9);
}

TEST(PlannerExpert, LayoutsPlaceTheExpertGroup) {
  // 16 GPUs, 8 per node, p = 1, d = 16, e = 8 (2 replicas of each shard).
  ModelCosts m = moeModel(4);
  Cluster cl = cluster(16, 1000);
  // pp-in-node numbers the expert ranks before the replicas: a group is 8
  // neighbours, one node (7/8 of 1 GB at 100 GB/s: 8.75 ms an all-to-all).
  auto inNode = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 1, 1,
                         Layout::PipelineInNode, expertSetup(8));
  ASSERT_TRUE(inNode.isOk()) << inNode.message();
  EXPECT_FALSE(inNode->epInterNode);
  EXPECT_NEAR(inNode->epCommTime, 4 * 4 * 0.00875, 1e-9);
  // dp-in-node numbers the replicas first: members 2 GPUs apart, 4 per
  // node; 4/8 of the rows cross the 10 GB/s network: 50 ms.
  auto spread = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 1, 1,
                         Layout::DataInNode, expertSetup(8));
  ASSERT_TRUE(spread.isOk()) << spread.message();
  EXPECT_TRUE(spread->epInterNode);
  EXPECT_NEAR(spread->epCommTime, 4 * 4 * 0.05, 1e-9);
}

TEST(PlannerExpert, DegreesTheModelAllows) {
  ModelCosts m = moeModel(2);
  EXPECT_TRUE(checkExpertDegree(m, 1, 3).isOk());
  EXPECT_TRUE(checkExpertDegree(m, 4, 8).isOk());
  EXPECT_EQ(checkExpertDegree(m, 3, 6).message(),
            "ep=3: does not divide the experts per layer (8)");
  EXPECT_EQ(checkExpertDegree(m, 4, 6).message(),
            "ep=4: does not divide the 6 data-parallel ranks (an expert "
            "group is e of them)");
  EXPECT_EQ(checkExpertDegree(uniformModel(2), 2, 4).message(),
            "ep=2: the model has no mixture-of-experts layers");
  // The sweep tries every allowed degree (d = 8 here: 1, 2, 4, 8).
  PlanOptions o = options(16, {ScheduleKind::OneFOneB});
  o.pipelineDegrees = {1};
  o.zeroStages = {0};
  auto r = plan::plan(m, cluster(8, 1000), o);
  ASSERT_TRUE(r.isOk()) << r.message();
  std::set<int> eps;
  for (const Candidate &c : r->ranked)
    eps.insert(c.ep);
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4, 8}));
}

TEST(PlannerRoofline, MemoryBoundPassesAndTheDefaultBandwidth) {
  // One layer of 1e9 parameters (2 GB of bf16 weights read per pass) and
  // 1e9 FLOPs per sequence and pass on a 1 TFLOP/s GPU with 1000 GB/s:
  // at b = 1 each pass moves 2 GB (2 ms) but computes 1 ms.
  ModelCosts m = uniformModel(1, /*params=*/1e9);
  for (LayerCost &l : m.layers)
    l.fwdFlops = l.bwdInputFlops = l.bwdWeightFlops = 1e9;
  Cluster cl = cluster(1, 1000);
  cl.memoryBandwidthGBps = 1000;
  PlanOptions o = options(4);
  auto b1 =
      evaluate(m, cl, o, ScheduleKind::OneFOneB, 1, 1, Layout::PipelineInNode);
  ASSERT_TRUE(b1.isOk()) << b1.message();
  EXPECT_NEAR(b1->pipelineTime, 4 * 3 * 2e-3, 1e-12);
  // b = 4: one microbatch computes 4 ms per pass and reads the weights once.
  auto b4 =
      evaluate(m, cl, o, ScheduleKind::OneFOneB, 1, 4, Layout::PipelineInNode);
  ASSERT_TRUE(b4.isOk()) << b4.message();
  EXPECT_NEAR(b4->pipelineTime, 3 * 4e-3, 1e-12);

  // The default by GPU class, and the optional key.
  Cluster h100 = cluster(1, 80), a100 = cluster(1, 80);
  h100.peakTflops = 989;
  a100.peakTflops = 312;
  EXPECT_DOUBLE_EQ(h100.memoryBytesPerSecond(), 3350e9);
  EXPECT_DOUBLE_EQ(a100.memoryBytesPerSecond(), 2039e9);
  auto parsed = parseCluster(R"({"gpus": 8, "gpus_per_node": 8,
      "memory_gb": 80, "peak_tflops": 989, "intra_node_gb_per_s": 450})");
  ASSERT_TRUE(parsed.isOk()) << parsed.message();
  EXPECT_DOUBLE_EQ(parsed->memoryBandwidthGBps, 3350);
  auto given = parseCluster(R"({"gpus": 8, "gpus_per_node": 8,
      "memory_gb": 80, "peak_tflops": 989, "intra_node_gb_per_s": 450,
      "memory_bandwidth_gb_per_s": 4800})");
  ASSERT_TRUE(given.isOk()) << given.message();
  EXPECT_DOUBLE_EQ(given->memoryBytesPerSecond(), 4800e9);
  auto bad = parseCluster(R"({"gpus": 8, "gpus_per_node": 8,
      "memory_gb": 80, "peak_tflops": 989, "intra_node_gb_per_s": 450,
      "memory_bandwidth_gb_per_s": "fast"})");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("key 'memory_bandwidth_gb_per_s': expected a "
                               "number, got string"),
            std::string::npos)
      << bad.message();
  auto zero = parseCluster(R"({"gpus": 8, "gpus_per_node": 8,
      "memory_gb": 80, "peak_tflops": 989, "intra_node_gb_per_s": 450,
      "memory_bandwidth_gb_per_s": 0})");
  ASSERT_FALSE(zero.isOk());
  EXPECT_NE(zero.message().find("expected a positive number"),
            std::string::npos);
}

TEST(PlannerSweep, PruningAutoKeepsTheTopAndSplitsAddUp) {
  // An 8-block model on 2 nodes of 8: every axis is swept.
  ModelCosts m = blockModel(8, 1e8, 1e8, 1e7);
  for (LayerCost &l : m.layers) {
    l.outputBytes = 1e7;
    l.unkeptBytes = 4e7;
    l.attnCoreFlops = 1e11;
  }
  Cluster cl = cluster(16, 24, 8);
  PlanOptions o = options(32);
  o.microbatchSizes = {1, 2};
  o.autoScheduler = heuristicAutoScheduler();
  o.topN = 2;
  auto pruned = plan::plan(m, cl, o);
  o.topN = 100000; // nothing can be pruned
  auto all = plan::plan(m, cl, o);
  ASSERT_TRUE(pruned.isOk() && all.isOk());
  EXPECT_EQ(all->pruned, 0);
  EXPECT_GT(pruned->pruned, 0);
  EXPECT_EQ(pruned->evaluated + pruned->pruned, all->evaluated);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(pruned->ranked[i].schedule, all->ranked[i].schedule);
    EXPECT_EQ(pruned->ranked[i].stepTime, all->ranked[i].stepTime);
    EXPECT_EQ(pruned->ranked[i].memoryBytes, all->ranked[i].memoryBytes);
  }
  std::set<int> tps, zeros, rcs;
  for (const Candidate &c : all->ranked) {
    EXPECT_NEAR(splitSum(c), c.stepTime, 1e-9 * c.stepTime) << c.schedule;
    EXPECT_GE(c.bubbleTime, 0);
    EXPECT_GE(c.ppCommTime, 0);
    tps.insert(c.tp);
    zeros.insert(c.zero);
    rcs.insert(static_cast<int>(c.recompute));
  }
  EXPECT_EQ(tps, (std::set<int>{1, 2, 4, 8}));
  EXPECT_EQ(zeros, (std::set<int>{0, 1}));
  EXPECT_EQ(rcs.size(), 3u);
}

TEST(PlannerExplain, ParsesSetups) {
  auto s = parseSetup("schedule=interleaved pp=4 tp=2 dp=8 b=2 "
                      "recompute=selective zero=1 chunks=3 layout=dp-in-node");
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(s->kind, ScheduleKind::Interleaved);
  EXPECT_EQ(s->pp, 4);
  EXPECT_EQ(s->tp, 2);
  EXPECT_EQ(s->dp, 8);
  EXPECT_EQ(s->microbatchSize, 2);
  EXPECT_EQ(s->recompute, Recompute::Selective);
  EXPECT_EQ(s->zero, 1);
  EXPECT_EQ(s->chunks, 3);
  EXPECT_TRUE(s->hasLayout);
  EXPECT_EQ(s->layout, Layout::DataInNode);
  // Defaults; commas separate as well as spaces.
  auto d = parseSetup("schedule=1f1b,pp=2");
  ASSERT_TRUE(d.isOk()) << d.message();
  EXPECT_EQ(d->tp, 1);
  EXPECT_EQ(d->dp, 0);
  EXPECT_EQ(d->microbatchSize, 1);
  EXPECT_EQ(d->recompute, Recompute::None);
  EXPECT_EQ(d->zero, 0);
  EXPECT_FALSE(d->hasLayout);

  const std::pair<const char *, const char *> bad[] = {
      {"", "empty setup"},
      {"pp=4", "missing key 'schedule'"},
      {"schedule=1f1b", "missing key 'pp'"},
      {"schedule=1f1b pp", "expected KEY=VALUE, got 'pp'"},
      {"schedule=1f1b =4", "expected KEY=VALUE, got '=4'"},
      {"schedule=1f1b pp=4 pp=4", "key 'pp' given twice"},
      {"schedule=1f1b pp=0", "key 'pp': expected a positive integer, got '0'"},
      {"schedule=1f1b pp=-1", "key 'pp': expected a positive integer"},
      {"schedule=1f1b pp=99999999999", "key 'pp': expected a positive integer"},
      {"schedule=nope pp=4", "key 'schedule': unknown schedule 'nope'"},
      {"schedule=1f1b pp=4 zero=4", "key 'zero': expected 0, 1, 2 or 3"},
      {"schedule=1f1b pp=4 zero=12", "key 'zero': expected 0, 1, 2 or 3"},
      {"schedule=1f1b pp=4 recompute=all", "key 'recompute': unknown policy"},
      {"schedule=1f1b pp=4 layout=x", "key 'layout': expected pp-in-node"},
      {"schedule=1f1b pp=4 chunks=1", "key 'chunks': expected an integer >= 2"},
      {"schedule=1f1b pp=4 mb=1", "unknown key 'mb'"},
      // A key the schedule would ignore (issue 43).
      {"schedule=dualpipev pp=4 chunks=2",
       "key 'chunks' applies to schedule=interleaved only; "
       "schedule=dualpipev places two chunks per rank (the V) by itself"},
      {"schedule=1f1b pp=4 chunks=4", "key 'chunks' applies to "
                                      "schedule=interleaved only"},
      {"schedule=auto pp=4 chunks=2", "key 'chunks' applies to "
                                      "schedule=interleaved only"},
  };
  for (auto [text, msg] : bad) {
    auto r = parseSetup(text);
    ASSERT_FALSE(r.isOk()) << text;
    EXPECT_NE(r.message().find(msg), std::string::npos)
        << text << ": " << r.message();
  }
}

TEST(PlanFlags, NumbersAndListsAreChecked) {
  // Issue 43: NaN or negative byte counts, --top out of range, empty list
  // items and --chunks without interleaved were accepted.
  auto errOf = [](PlanFlags f) {
    auto o = optionsFromFlags(f);
    EXPECT_FALSE(o.isOk());
    return o.isOk() ? std::string() : o.message();
  };
  PlanFlags good;
  good.globalBatch = 64;
  ASSERT_TRUE(optionsFromFlags(good).isOk());
  auto expect = [&](PlanFlags f, const std::string &part) {
    std::string msg = errOf(f);
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  PlanFlags f = good;
  f.stateBytesPerParam = std::nan("");
  expect(f, "--state-bytes-per-param must be a finite number in (0, 1024], "
            "got 'nan'");
  f = good;
  f.gradBytesPerParam = -4;
  expect(f, "--grad-bytes must be a finite number in (0, 64], got '-4'");
  f = good;
  f.gradBytesPerParam = 0;
  expect(f, "--grad-bytes must be a finite number in (0, 64], got '0'");
  for (int top : {0, -1, 101}) {
    f = good;
    f.topN = top;
    expect(f, "--top must be an integer in [1, 100], got '" +
                  std::to_string(top) + "'");
  }
  f = good;
  f.globalBatch = int64_t(1) << 40;
  expect(f, "--global-batch must be an integer in [1, 1073741824]");
  f = good;
  f.bytesPerElement = 1000;
  expect(f, "--bytes-per-element must be an integer in [1, 16]");
  for (auto [text, which] :
       {std::make_pair("1,2,,4", &PlanFlags::ep),
        std::make_pair("1,2,", &PlanFlags::tp),
        std::make_pair(",2", &PlanFlags::pp),
        std::make_pair("none,,full", &PlanFlags::recompute),
        std::make_pair("1f1b,,zbv", &PlanFlags::schedules)}) {
    f = good;
    f.*which = text;
    expect(f, std::string(": empty item in '") + text + "'");
  }
  f = good;
  f.microbatchSizes = "1, ,2";
  expect(f, "--microbatch-sizes: empty item in '1, ,2'");
  // --chunks given for schedules that ignore it.
  f = good;
  f.schedules = "1f1b,dualpipev";
  f.chunks = "4";
  f.chunksGiven = true;
  expect(f, "--chunks applies to interleaved only, which --schedules "
            "'1f1b,dualpipev' does not list");
  f.schedules = "1f1b,interleaved";
  EXPECT_TRUE(optionsFromFlags(f).isOk());
  // The bounds themselves are accepted.
  f = good;
  f.topN = 100;
  f.stateBytesPerParam = 1024;
  f.gradBytesPerParam = 64;
  EXPECT_TRUE(optionsFromFlags(f).isOk());
}

TEST(PlannerExplain, RanksASweptSetupWhereTheSweepDoes) {
  ModelCosts m = uniformModel(8, /*params=*/1e8, /*stash=*/1e8, 1e6);
  Cluster cl = cluster(8, 1000);
  PlanOptions o = options(16, {ScheduleKind::OneFOneB, ScheduleKind::ZBH1,
                               ScheduleKind::Interleaved});
  o.microbatchSizes = {1, 2};
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  ASSERT_GT(r->ranked.size(), 4u);
  for (size_t i = 0; i < r->ranked.size(); ++i) {
    const Candidate &c = r->ranked[i];
    SetupSpec s;
    s.kind = c.kind;
    s.pp = c.pp;
    s.tp = c.tp;
    s.microbatchSize = c.microbatchSize;
    s.recompute = c.recompute;
    s.zero = c.zero;
    s.hasLayout = true;
    s.layout = c.layout;
    auto e = explain(*r, m, cl, o, s);
    ASSERT_TRUE(e.isOk()) << e.message();
    EXPECT_EQ(e->setup.stepTime, c.stepTime) << i;
    EXPECT_EQ(e->setup.memoryBytes, c.memoryBytes) << i;
    EXPECT_TRUE(e->notSearched.empty()) << e->notSearched;
    // Ties (ZeRO-1 and 0 with equal memory, say) rank the first of them.
    EXPECT_LE(e->rank, int(i) + 1);
    EXPECT_EQ(r->ranked[e->rank - 1].stepTime, c.stepTime);
    EXPECT_EQ(e->wouldRank, e->rank);
  }
}

TEST(PlannerExplain, OutsideTheSearchSpaceSaysWhyAndWhereItWouldRank) {
  ModelCosts m = uniformModel(8, 1e8, 1e8, 1e6);
  Cluster cl = cluster(8, 1000);
  PlanOptions o = options(16, {ScheduleKind::OneFOneB});
  o.pipelineDegrees = {4};
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  auto s = parseSetup("schedule=zb-h1 pp=2 b=2");
  ASSERT_TRUE(s.isOk());
  auto e = explain(*r, m, cl, o, *s);
  ASSERT_TRUE(e.isOk()) << e.message();
  EXPECT_EQ(e->rank, 0);
  EXPECT_NE(e->notSearched.find("pp=2 is not in --pp 4"), std::string::npos)
      << e->notSearched;
  EXPECT_NE(e->notSearched.find("b=2 is not in --microbatch-sizes 1"),
            std::string::npos);
  EXPECT_NE(e->notSearched.find("schedule zb-h1 is not in --schedules"),
            std::string::npos);
  int ahead = 0;
  for (const Candidate &c : r->ranked)
    ahead += c.stepTime < e->setup.stepTime;
  EXPECT_EQ(e->wouldRank, ahead + 1);

  // dp is a check of the GPU count.
  auto bad = parseSetup("schedule=1f1b pp=4 dp=4");
  ASSERT_TRUE(bad.isOk());
  auto err = explain(*r, m, cl, o, *bad);
  ASSERT_FALSE(err.isOk());
  EXPECT_NE(err.message().find("dp=4: pp x tp x dp = 16 differs from the "
                               "cluster's 8 GPUs (dp = GPUs / (pp tp) = 2)"),
            std::string::npos)
      << err.message();
}

TEST(PlannerExplain, OverMemoryIsNotRanked) {
  // 4 one-layer stages of 1 GB stash, 8 microbatches: GPipe's rank 0 holds
  // all 8 (8 GB), 1F1B's at most 4 (4 GB); 6 GiB GPUs.
  ModelCosts m = uniformModel(4, 1e6, 1e9);
  Cluster cl = cluster(4, 6);
  PlanOptions o = options(8, {ScheduleKind::OneFOneB});
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  auto s = parseSetup("schedule=gpipe pp=4");
  ASSERT_TRUE(s.isOk());
  auto e = explain(*r, m, cl, o, *s);
  ASSERT_TRUE(e.isOk()) << e.message();
  EXPECT_FALSE(e->setup.fits);
  EXPECT_EQ(e->rank, 0);
  EXPECT_NE(e->notSearched.find("schedule gpipe"), std::string::npos);
}

TEST(PlannerFit, EfficiencyReproducesTheTargetThroughput) {
  ModelCosts m = uniformModel(8, 1e8, 1e8, 1e6);
  Cluster cl = cluster(8, 1000);
  cl.efficiency = 0.37;
  PlanOptions o = options(16);
  auto s = parseSetup("schedule=1f1b pp=4 zero=1");
  ASSERT_TRUE(s.isOk());
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk());
  auto at37 = explain(*r, m, cl, o, *s);
  ASSERT_TRUE(at37.isOk()) << at37.message();
  Cluster other = cl;
  other.efficiency = 0.9;
  auto eff = fitEfficiency(m, other, o, *s, at37->setup.tokensPerSecond);
  ASSERT_TRUE(eff.isOk()) << eff.message();
  EXPECT_NEAR(*eff, 0.37, 1e-6);
  // Unreachable targets.
  auto high = fitEfficiency(m, other, o, *s, 1e3 * at37->setup.tokensPerSecond);
  ASSERT_FALSE(high.isOk());
  EXPECT_NE(high.message().find("even at efficiency 1"), std::string::npos);
  EXPECT_FALSE(fitEfficiency(m, other, o, *s, 0).isOk());
}

TEST(PlannerSweep, InterleavedVirtualStages) {
  // 16 layers on p = 2: interleaved with v = 2 (4 stages) and v = 4 (8).
  ModelCosts m = uniformModel(16, /*params=*/1e6, /*stash=*/1e6);
  PlanOptions o = options(16, {ScheduleKind::Interleaved});
  o.pipelineDegrees = {2};
  o.chunkCounts = {4, 2};
  o.topN = 100;
  auto r = plan::plan(m, cluster(2, 1000), o);
  ASSERT_TRUE(r.isOk()) << r.message();
  std::set<std::pair<int, int>> seen; // (chunks, stages)
  for (const Candidate &c : r->ranked)
    seen.insert({c.chunks, c.stages});
  EXPECT_EQ(seen, (std::set<std::pair<int, int>>{{2, 4}, {4, 8}}));
  // More chunks, smaller bubble: (p - 1) / v of a rank's passes.
  EXPECT_EQ(r->ranked.front().chunks, 4);
  // An explained v outside the list says so.
  SetupSpec spec;
  spec.kind = ScheduleKind::Interleaved;
  spec.pp = 2;
  spec.chunks = 8;
  auto e = explain(*r, m, cluster(2, 1000), o, spec);
  ASSERT_TRUE(e.isOk()) << e.message();
  EXPECT_EQ(e->setup.chunks, 8);
  EXPECT_EQ(e->rank, 0);
  EXPECT_EQ(e->notSearched, "chunks=8 is not in --chunks 4,2");
}

TEST(PlannerRecompute, OnlyTheStagesOverMemory) {
  // 4 blocks of 1 GB stash per sequence, 1F1B on p = 2 with m = 4: rank 0
  // holds 2 microbatches of its 2 layers (4 GB), rank 1 one (2 GB). With 3
  // GiB per GPU only rank 0 is over; full recomputation on stage 0 alone
  // brings it under, and recomputes half as much as on every stage.
  ModelCosts m = blockModel(4, /*params=*/0, /*stash=*/1e9,
                            /*hiddenBytes=*/1e8);
  Cluster cl = cluster(2, 3.0);
  PlanOptions o = options(4, {ScheduleKind::OneFOneB});
  o.pipelineDegrees = {2};
  o.recomputePolicies = {Recompute::None, Recompute::Full};
  o.topN = 10;
  auto r = plan::plan(m, cl, o);
  ASSERT_TRUE(r.isOk()) << r.message();
  ASSERT_FALSE(r->ranked.empty());
  const Candidate &best = r->ranked.front();
  EXPECT_EQ(best.recompute, Recompute::Full);
  EXPECT_EQ(best.recomputeStages, std::vector<int>{0});
  EXPECT_TRUE(best.fits);
  EXPECT_NEAR(splitSum(best), best.stepTime, 1e-9);
  // Full recomputation everywhere is ranked after it (slower).
  auto all = evaluate(m, cl, o, ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, setup(1, Recompute::Full));
  ASSERT_TRUE(all.isOk()) << all.message();
  EXPECT_GT(all->stepTime, best.stepTime);
  EXPECT_NEAR(best.recomputeTime, all->recomputeTime / 2, 1e-9);
  // The same setup by hand, and stages outside the schedule.
  SetupOptions only = setup(1, Recompute::Full);
  only.recomputeStages = {0};
  auto byHand = evaluate(m, cl, o, ScheduleKind::OneFOneB, 2, 1,
                         Layout::PipelineInNode, only);
  ASSERT_TRUE(byHand.isOk()) << byHand.message();
  EXPECT_DOUBLE_EQ(byHand->stepTime, best.stepTime);
  EXPECT_DOUBLE_EQ(byHand->memoryBytes, best.memoryBytes);
  only.recomputeStages = {2};
  auto bad = evaluate(m, cl, o, ScheduleKind::OneFOneB, 2, 1,
                      Layout::PipelineInNode, only);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.message(), "recompute stage 2 is not one of 1f1b's 2 stages "
                           "(0..1)");
}

TEST(PlannerExpert, LinkEfficienciesSlowTheirTransfers) {
  auto cl = parseCluster(R"({"gpus": 8, "gpus_per_node": 8, "memory_gb": 1000,
      "peak_tflops": 1, "intra_node_gb_per_s": 100,
      "all_reduce_efficiency": 0.5, "all_to_all_efficiency": 0.25,
      "p2p_efficiency": 0.8})");
  ASSERT_TRUE(cl.isOk()) << cl.message();
  EXPECT_DOUBLE_EQ(cl->allReduceEfficiency, 0.5);
  EXPECT_DOUBLE_EQ(cl->allToAllEfficiency, 0.25);
  EXPECT_DOUBLE_EQ(cl->p2pEfficiency, 0.8);
  auto bad = parseCluster(R"({"gpus": 8, "gpus_per_node": 8, "memory_gb": 80,
      "peak_tflops": 1, "intra_node_gb_per_s": 100,
      "p2p_efficiency": 1.5})");
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.message(), "cluster: key 'p2p_efficiency': expected a "
                           "fraction of the link bandwidth in (0, 1]");
  // Against the same cluster at full efficiency (the by-hand numbers of
  // AllToAllsShardsAndGradientsByHand): the all-to-alls take 4x, the
  // gradient all-reduce 2x.
  ModelCosts m = moeModel(4);
  Cluster full = cluster(8, 1000);
  Cluster slow = full;
  slow.allReduceEfficiency = 0.5;
  slow.allToAllEfficiency = 0.25;
  auto a = evaluate(m, full, seriesOptions(16), ScheduleKind::OneFOneB, 2, 1,
                    Layout::PipelineInNode, expertSetup(4));
  auto b = evaluate(m, slow, seriesOptions(16), ScheduleKind::OneFOneB, 2, 1,
                    Layout::PipelineInNode, expertSetup(4));
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_NEAR(b->epCommTime, 4 * a->epCommTime, 1e-12);
  EXPECT_NEAR(b->dpTime, 2 * a->dpTime, 1e-15);
}

TEST(PlannerGradOverlap, LayerBucketsHideAllButTheLastByHand) {
  // Pure data parallelism, d = 2, one microbatch of 4 layers (F = B = W =
  // 1 s each): the backward runs 4..12 s and finishes a layer's gradients
  // every 2 s, last layer first (at 6, 8, 10, 12 s). Each layer's ring
  // all-reduce takes 2 (1/2) 4e9 bytes / 100 GB/s = 0.04 s: per layer, only
  // the first layer's, which starts at 12 s, is exposed; per stage and
  // off, all four.
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  const double bucket = 2.0 * 0.5 * 4e9 / 100e9;
  for (GradOverlap g :
       {GradOverlap::Off, GradOverlap::Stage, GradOverlap::Layer}) {
    PlanOptions o = options(2);
    o.gradOverlap = g;
    auto c = evaluate(m, cluster(2, 1000), o, ScheduleKind::OneFOneB, 1, 1,
                      Layout::PipelineInNode);
    ASSERT_TRUE(c.isOk()) << c.message();
    EXPECT_NEAR(c->pipelineTime, 12, 1e-9);
    EXPECT_NEAR(c->dpReduceTime, 4 * bucket, 1e-12);
    EXPECT_NEAR(c->dpTime, g == GradOverlap::Layer ? bucket : 4 * bucket,
                1e-12)
        << gradOverlapName(g);
    EXPECT_NEAR(c->stepTime, c->pipelineTime + c->dpTime, 1e-12);
  }
}

TEST(PlannerGradOverlap, SlowLinksExposeWhatTheBackwardCannotHide) {
  // The same at 1 GB/s: each bucket takes 4 s, the link is busy from 6 s
  // on and ends at 6 + 16 = 22 s: 10 s after the pipeline.
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  Cluster cl = cluster(2, 1000);
  cl.intraNodeGBps = 1;
  PlanOptions o = options(2);
  o.gradOverlap = GradOverlap::Layer;
  auto c = evaluate(m, cl, o, ScheduleKind::OneFOneB, 1, 1,
                    Layout::PipelineInNode);
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_NEAR(c->dpReduceTime, 16, 1e-9);
  EXPECT_NEAR(c->dpTime, 10, 1e-9);
  GradOverlap parsed;
  EXPECT_TRUE(parseGradOverlap("stage", parsed));
  EXPECT_EQ(parsed, GradOverlap::Stage);
  EXPECT_FALSE(parseGradOverlap("bucket", parsed));
}

TEST(Planner, ActivationOffloadLowersThePeakAndChargesExposedCopies) {
  // 1F1B on 8 ranks, 16 microbatches, 1 GB of stash per stage: rank 0
  // holds 8 M_B without offload, 3 with the runtime's plan
  // (--offload-activations auto, as pipeforge-sched replays it).
  ModelCosts m = uniformModel(8, /*params=*/1e6, /*stash=*/1e9);
  Cluster cl = cluster(8, 1000);
  SetupOptions off, on;
  on.offload = true;
  auto a = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 8, 1,
                    Layout::PipelineInNode, off);
  auto b = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 8, 1,
                    Layout::PipelineInNode, on);
  ASSERT_TRUE(a.isOk()) << a.message();
  ASSERT_TRUE(b.isOk()) << b.message();
  EXPECT_FALSE(a->offload);
  EXPECT_TRUE(b->offload);
  EXPECT_DOUBLE_EQ(a->activationBytes, 8e9);
  EXPECT_DOUBLE_EQ(b->activationBytes, 3e9);
  EXPECT_DOUBLE_EQ(b->activationBytesNoOffload, 8e9);
  EXPECT_GT(b->offloadHostBytes, 0);
  EXPECT_GT(b->offloadStashes, 0);
  // The default host link (25 GB/s) moves 1 GB in 0.04 s, under the 1 s
  // (and longer) compute actions: no exposed copies, the same step.
  EXPECT_DOUBLE_EQ(b->offloadCopyTime, 0);
  EXPECT_DOUBLE_EQ(b->offloadCopyTotal, b->offloadStashes * 2 * 0.04);
  EXPECT_DOUBLE_EQ(b->stepTime, a->stepTime);

  // At 0.1 GB/s a copy takes 10 s: most of it is exposed, and charged.
  cl.hostLinkGBps = 0.1;
  auto slow = evaluate(m, cl, options(16), ScheduleKind::OneFOneB, 8, 1,
                       Layout::PipelineInNode, on);
  ASSERT_TRUE(slow.isOk()) << slow.message();
  EXPECT_GT(slow->offloadCopyTime, 0);
  EXPECT_LT(slow->offloadCopyTime, slow->offloadCopyTotal);
  EXPECT_DOUBLE_EQ(slow->stepTime, slow->pipelineTime + slow->offloadCopyTime);
  EXPECT_DOUBLE_EQ(slow->activationBytes, 3e9);
}

TEST(Planner, SweepTriesOffloadOnlyWhereItIsNeeded) {
  // 5 GiB GPUs: 8 GB of activations on rank 0 are over memory, 3 GB fit.
  ModelCosts m = uniformModel(8, /*params=*/1e6, /*stash=*/1e9);
  PlanOptions o = options(16, {ScheduleKind::OneFOneB});
  o.pipelineDegrees = {8};
  auto without = plan::plan(m, cluster(8, 5), o);
  EXPECT_FALSE(without.isOk());
  o.offloadModes = {false, true};
  auto with = plan::plan(m, cluster(8, 5), o);
  ASSERT_TRUE(with.isOk()) << with.message();
  ASSERT_FALSE(with->ranked.empty());
  EXPECT_TRUE(with->ranked.front().offload);
  EXPECT_NE(launchCommands(with->ranked.front(), m, cluster(8, 5), o)
                .find("--offload-activations auto"),
            std::string::npos);
  // With room for 8 GB the setup fits without offload, which is not tried.
  auto roomy = plan::plan(m, cluster(8, 1000), o);
  ASSERT_TRUE(roomy.isOk()) << roomy.message();
  for (const Candidate &c : roomy->ranked)
    EXPECT_FALSE(c.offload);
}

TEST(Planner, OffloadFlagIsChecked) {
  PlanFlags f;
  f.globalBatch = 8;
  f.offload = "maybe";
  auto o = optionsFromFlags(f);
  ASSERT_FALSE(o.isOk());
  EXPECT_EQ(o.message(), "--offload: unknown value 'maybe' (known: off auto)");
  f.offload = "off,auto";
  auto ok = optionsFromFlags(f);
  ASSERT_TRUE(ok.isOk()) << ok.message();
  EXPECT_EQ(ok->offloadModes, (std::vector<bool>{false, true}));
  auto spec = parseSetup("schedule=1f1b pp=2 offload=auto");
  ASSERT_TRUE(spec.isOk()) << spec.message();
  EXPECT_TRUE(spec->offload);
  EXPECT_FALSE(parseSetup("schedule=1f1b pp=2 offload=yes").isOk());
}

TEST(PlannerFloat8, LinearsAtTheFp8RateAndAsyncTpByHand) {
  // DividesComputeAndAddsAllReducesByHand's setup (4 blocks, t = 2, p = 2,
  // 8 microbatches) with the blocks' linears at an FP8 rate of 2 TFLOP/s:
  // every pass is linear GEMMs here (no attention core), 0.25 s each; the
  // casts (a few hundred kB at 2039 GB/s) add microseconds. F's two
  // all-reduces move their all-gather half in float8: 3/4 of 0.02 s.
  ModelCosts m = blockModel(4, /*params=*/1e6, /*stash=*/1e9,
                            /*hiddenBytes=*/1e9);
  Cluster cl = cluster(4, 1000, 4);
  cl.fp8PeakTflops = 2;
  PlanOptions o = options(8);
  o.fp8Linear = true;
  auto c = evaluate(m, cl, o, ScheduleKind::OneFOneB, 2, 1,
                    Layout::PipelineInNode, setup(2));
  ASSERT_TRUE(c.isOk()) << c.message();
  EXPECT_NEAR(c->computeTime, 8 * (2 * 2 * 0.75) / 2, 1e-4);
  EXPECT_GT(c->computeTime, 8 * (2 * 2 * 0.75) / 2); // the casts
  EXPECT_NEAR(c->tpCommTime, 8 * (4 * (0.015 + 0.02)) / 2, 1e-9);
  EXPECT_NEAR(splitSum(*c), c->stepTime, 1e-9);
  // AsyncTP: 0.015 s and 0.02 s of collectives under 0.25 s of GEMMs.
  o.asyncTp = true;
  auto a = evaluate(m, cl, o, ScheduleKind::OneFOneB, 2, 1,
                    Layout::PipelineInNode, setup(2));
  ASSERT_TRUE(a.isOk()) << a.message();
  EXPECT_DOUBLE_EQ(a->tpCommTime, 0);
  EXPECT_NEAR(a->computeTime, c->computeTime, 1e-12);

  // The FP8 peak: the key, else twice the bf16 peak on an H100-class GPU,
  // else the bf16 peak.
  Cluster h100 = cluster(1, 80), a100 = cluster(1, 80);
  h100.peakTflops = 989;
  a100.peakTflops = 312;
  EXPECT_DOUBLE_EQ(h100.fp8FlopsPerSecond(), 1978e12);
  EXPECT_DOUBLE_EQ(a100.fp8FlopsPerSecond(), 312e12);
  auto parsed = parseCluster(R"({"gpus": 8, "gpus_per_node": 8,
      "memory_gb": 80, "peak_tflops": 989, "intra_node_gb_per_s": 450,
      "fp8_peak_tflops": 1979})");
  ASSERT_TRUE(parsed.isOk()) << parsed.message();
  EXPECT_DOUBLE_EQ(parsed->fp8FlopsPerSecond(), 1979e12);
}

TEST(PlannerZero, StageGatherOncePerStep) {
  // ThreeGathersEveryLayerPerMicrobatch's model (4 layers of 1e9
  // parameters, d = 4, 2 microbatches) with --zero-gather stage: one
  // gather (15 ms a layer) and one reduce-scatter (30 ms) per step, not
  // per microbatch; the peak holds the whole stage's weights (2 bytes) and
  // its unsharded gradients (--grad-bytes 4) beside the shards.
  ModelCosts m = uniformModel(4, /*params=*/1e9);
  Cluster cl = cluster(4, 1000);
  PlanOptions o = options(8);
  o.zeroGatherStage = true;
  auto z = evaluate(m, cl, o, ScheduleKind::OneFOneB, 1, 1,
                    Layout::PipelineInNode, setup(1, Recompute::None, 3));
  ASSERT_TRUE(z.isOk()) << z.message();
  EXPECT_TRUE(z->zeroGatherStage);
  EXPECT_NEAR(z->zeroCommTime, 4 * (0.015 + 0.030), 1e-9);
  EXPECT_DOUBLE_EQ(z->zeroExposedTime, 0);
  EXPECT_DOUBLE_EQ(z->weightBytes, 1e9 * 2 + 4e9 * 2);
  EXPECT_DOUBLE_EQ(z->gradBytes, 1e9 * 2 + 4e9 * 4);
  EXPECT_DOUBLE_EQ(z->optimizerBytes, 4e9 * 3);
}
