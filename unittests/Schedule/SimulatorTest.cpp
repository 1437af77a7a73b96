//===- SimulatorTest.cpp - Tests for the schedule simulator ---------------===//

#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Offload.h"
#include "pipeforge/Schedule/Verify.h"

#include "HandSchedules.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testing;

namespace {

/// The Zero Bubble paper's cost: max over ranks of the compute span.
double zbCost(const SimResult &r) {
  double c = 0;
  for (const RankStats &st : r.ranks)
    c = std::max(c, st.lastEnd - st.firstStart);
  return c;
}

CostModel costs(double f, double b, double w, double c = 0) {
  CostModel m;
  m.tf = f;
  m.tb = b;
  m.tw = w;
  m.tcomm = c;
  return m;
}

struct Fbw {
  double f, b, w;
};
const Fbw kTimes[] = {{1, 1, 1}, {2, 2, 1}, {18.5, 18.1, 9.3}, {3, 3, 2}};

TEST(SimulatorTest, OneFOneBClosedForm) {
  for (const Fbw &t : kTimes)
    for (int p : {2, 4, 8}) {
      int m = 3 * p;
      Expected<SimResult> r = simulate(hand1F1B(p, m), costs(t.f, t.b, t.w));
      ASSERT_TRUE(r) << r.message();
      double bubble = zbCost(*r) - m * (t.f + t.b + t.w);
      EXPECT_NEAR(bubble, (p - 1) * (t.f + t.b + t.w), 1e-9);
      EXPECT_NEAR(r->makespan, (m + p - 1) * (t.f + t.b + t.w), 1e-9);
      // Rank 0 holds p activations at its peak.
      EXPECT_DOUBLE_EQ(r->ranks[0].peakMemory, p);
    }
}

TEST(SimulatorTest, ZBH1ClosedForm) {
  for (const Fbw &t : kTimes)
    for (int p : {2, 4, 8}) {
      int m = 3 * p;
      Expected<SimResult> r = simulate(handZB(p, m, 1), costs(t.f, t.b, t.w));
      ASSERT_TRUE(r) << r.message();
      double bubble = zbCost(*r) - m * (t.f + t.b + t.w);
      EXPECT_NEAR(bubble, (p - 1) * (t.f + t.b - t.w), 1e-9);
      EXPECT_DOUBLE_EQ(r->ranks[0].peakMemory, p);
    }
}

TEST(SimulatorTest, ZBH2ClosedForm) {
  for (const Fbw &t : kTimes)
    for (int p : {2, 4, 8}) {
      int m = 3 * p;
      Expected<SimResult> r = simulate(handZB(p, m, 2), costs(t.f, t.b, t.w));
      ASSERT_TRUE(r) << r.message();
      double bubble = zbCost(*r) - m * (t.f + t.b + t.w);
      EXPECT_NEAR(bubble, (p - 1) * (t.f + t.b - 2 * t.w), 1e-9);
      EXPECT_DOUBLE_EQ(r->ranks[0].peakMemory, 2 * p - 1);
    }
}

TEST(SimulatorTest, ZBH2WithCommMatchesZeroBubbleCodeCheck) {
  // The Zero Bubble code: cost - m(f+b+w) = (p-1)(f+b+2c-2w).
  double f = 3, b = 3, w = 2, c = 0.25;
  int p = 4, m = 12;
  Expected<SimResult> r = simulate(handZB(p, m, 2), costs(f, b, w, c));
  ASSERT_TRUE(r) << r.message();
  EXPECT_NEAR(zbCost(*r) - m * (f + b + w), (p - 1) * (f + b + 2 * c - 2 * w),
              1e-9);
}

TEST(SimulatorTest, BubbleRateDefinitions) {
  int p = 4, m = 8;
  Expected<SimResult> r = simulate(hand1F1B(p, m), costs(1, 1, 1));
  ASSERT_TRUE(r) << r.message();
  double sumBusy = 0, maxBusy = 0;
  for (const RankStats &st : r->ranks) {
    sumBusy += st.busy;
    maxBusy = std::max(maxBusy, st.busy);
  }
  EXPECT_DOUBLE_EQ(sumBusy, p * m * 3.0);
  EXPECT_NEAR(r->bubbleRate, 1 - sumBusy / (p * r->makespan), 1e-12);
  EXPECT_NEAR(r->zbBubbleRate, (zbCost(*r) - maxBusy) / zbCost(*r), 1e-12);
  EXPECT_NEAR(r->zbBubbleRate, 9.0 / 33.0, 1e-12);
}

TEST(SimulatorTest, CrossRankEdgesAddComm) {
  // GPipe on 2 ranks, one microbatch: F0 c F1 BW1 c BW0.
  CostModel cost = costs(1, 2, 3, 0.5);
  Expected<SimResult> r = simulate(handGPipe(2, 1), cost);
  ASSERT_TRUE(r) << r.message();
  EXPECT_DOUBLE_EQ(r->makespan, 1 + 0.5 + 1 + 5 + 0.5 + 5);
  EXPECT_DOUBLE_EQ(r->ranks[1].firstStart, 1.5);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedComm, 0); // no messages, no Recv
  // Same-rank hand-off on the V bottom adds nothing.
  Schedule v = handVOverlap();
  CostModel vc;
  vc.tcomm = 10;
  Expected<SimResult> rv = simulate(v, vc);
  ASSERT_TRUE(rv) << rv.message();
  // F1.0 -> F2.0 on rank 1 is local: F2.0 starts right after F1.0.
  EXPECT_DOUBLE_EQ(rv->intervals[7 + 1].start, rv->intervals[7 + 0].end);
}

TEST(SimulatorTest, MessagesReplayWithExposedComm) {
  Schedule s = handGPipe(2, 1);
  insertCommByTime(s);
  ASSERT_TRUE(s.hasComm);
  ASSERT_EQ(s.programs[0].size(), 4u); // F SEND RECV BW
  CostModel cost = costs(1, 2, 3, 0.5);
  Expected<SimResult> r = simulate(s, cost);
  ASSERT_TRUE(r) << r.message();
  EXPECT_DOUBLE_EQ(r->makespan, 13);
  // Rank 1 waits 1.5 in its first Recv; rank 0 waits in its grad Recv from
  // t=1 until the gradient arrives at 7.5 + 0.5.
  EXPECT_DOUBLE_EQ(r->ranks[1].exposedComm, 1.5);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedComm, 7);
  EXPECT_EQ(r->intervals.size(), 8u);
}

TEST(SimulatorTest, MessagesMatchComputeOnlyWithoutComm) {
  for (int c : {0, 1, 2}) {
    Schedule s = c == 0 ? hand1F1B(4, 8) : handZB(4, 8, c);
    Expected<SimResult> plain = simulate(s, costs(2, 2, 1));
    insertCommByTime(s, costs(2, 2, 1));
    Expected<SimResult> msgs = simulate(s, costs(2, 2, 1));
    ASSERT_TRUE(plain && msgs);
    EXPECT_DOUBLE_EQ(plain->makespan, msgs->makespan);
    EXPECT_DOUBLE_EQ(plain->zbBubbleRate, msgs->zbBubbleRate);
  }
}

TEST(SimulatorTest, OverlapTimeAndMemory) {
  Schedule s = handVOverlap();
  CostModel cost = costs(1, 1, 1);
  Expected<SimResult> sum = simulate(s, cost);
  ASSERT_TRUE(sum) << sum.message();
  const Interval &pair = sum->intervals[3];
  ASSERT_EQ(pair.actionIndex, 3u);
  EXPECT_DOUBLE_EQ(pair.end - pair.start, 3); // F + BW
  cost.tfb = 2.5;
  Expected<SimResult> fused = simulate(s, cost);
  ASSERT_TRUE(fused);
  EXPECT_DOUBLE_EQ(fused->intervals[3].end - fused->intervals[3].start, 2.5);
  // Rank 0: F0.0 F0.1 F3.0 then the pair allocates F3.1 before BW3.0 frees.
  EXPECT_DOUBLE_EQ(fused->ranks[0].peakMemory, 4);
  EXPECT_DOUBLE_EQ(fused->ranks[0].busy, 3 * 1 + 2.5 + 3 * 2); // 3F, pair, 3BW
}

TEST(SimulatorTest, MemoryDeltasSplitBackward) {
  // One stage, one microbatch: F +1, B -0.5, W -0.5.
  Schedule s = emptyLinear("one", 1, 1);
  s.programs[0] = {cF(0, 0), cB(0, 0), cW(0, 0)};
  CostModel cost;
  cost.memB = 4;
  cost.memW = 1;
  Expected<SimResult> r = simulate(s, cost);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->ranks[0].peakMemory, 4);
  EXPECT_DOUBLE_EQ(cost.memDelta(WorkKind::B, 0), -3);
  EXPECT_DOUBLE_EQ(cost.memDelta(WorkKind::W, 0), -1);
  EXPECT_DOUBLE_EQ(cost.memDelta(WorkKind::BW, 0), -4);
}

TEST(SimulatorTest, PerStageCosts) {
  CostModel cost;
  cost.tfStage = {1, 4};
  cost.tbw = 7;
  EXPECT_DOUBLE_EQ(cost.timeOf(WorkKind::F, 1), 4);
  EXPECT_DOUBLE_EQ(cost.timeOf(WorkKind::F, 5), 1); // past the vector
  EXPECT_DOUBLE_EQ(cost.timeOf(WorkKind::BW, 0), 7);
  cost.tbw = -1;
  cost.tbStage = {2, 2};
  EXPECT_DOUBLE_EQ(cost.timeOf(WorkKind::BW, 0), 3);
  Expected<SimResult> r = simulate(handGPipe(2, 1), cost);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->makespan, 1 + 4 + 3 + 3);
}

TEST(SimulatorTest, GradReduceMeets) {
  Schedule s = emptyLinear("gr", 2, 1);
  s.placement = Placement::dual(2);
  s.hasComm = true;
  // Copy 0: stage 0 on rank 0; copy 1: stage 0 on rank 1. No cross deps
  // with one stage... use two stages: dual(2) has 2 stages per copy.
  s.programs[0] = {cF(0, 0), Action::send(Payload::Activation,
                                          wk(WorkKind::F, 0, 0), 1),
                   Action::recv(Payload::Gradient, wk(WorkKind::BW, 1, 0), 1),
                   cBW(0, 0), Action::gradReduce(1)};
  s.programs[1] = {Action::recv(Payload::Activation, wk(WorkKind::F, 0, 0), 0),
                   cF(1, 0), cBW(1, 0),
                   Action::send(Payload::Gradient, wk(WorkKind::BW, 1, 0), 0),
                   Action::gradReduce(0)};
  // Copy 1 runs nothing in this toy: the simulator does not require it.
  CostModel cost = costs(1, 1, 1);
  Expected<SimResult> r = simulate(s, cost);
  ASSERT_TRUE(r) << r.message();
  // Rank 1: RECV 0..1, F 1..2, BW 2..4, reaches GRADREDUCE at 4; rank 0
  // waits for the gradient 1..4, BW 4..6, reaches it at 6. Both leave at 6.
  EXPECT_DOUBLE_EQ(r->makespan, 6);
  EXPECT_DOUBLE_EQ(r->ranks[1].exposedComm, 1 + 2);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedComm, 3);
}

// GRADREDUCE's exchange (CostModel::gradBytes): after both ranks have
// reached it, the latency and the bytes of every (copy, stage) the rank
// holds over the bandwidth; both leave together, and it is exposed comm.
TEST(SimulatorTest, GradReduceTakesItsBytes) {
  Schedule s = emptyLinear("gr", 2, 1);
  s.placement = Placement::dual(2);
  s.hasComm = true;
  s.programs[0] = {cF(0, 0), Action::send(Payload::Activation,
                                          wk(WorkKind::F, 0, 0), 1),
                   Action::recv(Payload::Gradient, wk(WorkKind::BW, 1, 0), 1),
                   cBW(0, 0), Action::gradReduce(1)};
  s.programs[1] = {Action::recv(Payload::Activation, wk(WorkKind::F, 0, 0), 0),
                   cF(1, 0), cBW(1, 0),
                   Action::send(Payload::Gradient, wk(WorkKind::BW, 1, 0), 0),
                   Action::gradReduce(0)};
  CostModel cost = costs(1, 1, 1);
  // Each rank holds stage 0 of one copy and stage 1 of the other: 2 + 6
  // bytes, 2 time units at 4 bytes per unit, after a latency of 0.5.
  cost.gradBytesStage = {2, 6};
  cost.gradReduceBytesPerTime = 4;
  cost.gradReduceLatency = 0.5;
  Expected<SimResult> r = simulate(s, cost);
  ASSERT_TRUE(r) << r.message();
  // They meet at 6 (GradReduceMeets) and leave at 6 + 2.5.
  EXPECT_DOUBLE_EQ(r->makespan, 8.5);
  EXPECT_DOUBLE_EQ(r->ranks[1].exposedComm, 1 + 2 + 2.5);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedComm, 3 + 2.5);
  EXPECT_DOUBLE_EQ(r->ranks[0].busy, 3); // not busy time
  // ZeRO over the pair: a reduce-scatter, half the bytes.
  cost.gradReduceShare = 0.5;
  r = simulate(s, cost);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->makespan, 6 + 0.5 + 1);
  // No bandwidth: the latency alone.
  cost.gradReduceBytesPerTime = 0;
  r = simulate(s, cost);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->makespan, 6.5);
  // Costs are checked.
  cost.gradReduceBytesPerTime = -1;
  std::string msg = simulate(s, cost).status().message();
  EXPECT_NE(msg.find("gradient reduce bandwidth is -1"), std::string::npos)
      << msg;
  cost.gradReduceBytesPerTime = 1;
  cost.gradBytesStage = {1, std::nan("")};
  msg = simulate(s, cost).status().message();
  EXPECT_NE(msg.find("gradient bytes of stage 1 is nan"), std::string::npos)
      << msg;
}

// DualPipe's and Chimera's GRADREDUCE is every rank's last action: with
// uniform gradient bytes every pair meets as before and leaves later by
// the latency plus its two stages' bytes over the bandwidth, so the step
// grows by exactly that; the compute does not move.
TEST(SimulatorTest, GradReduceLengthensDualPipesStep) {
  for (ScheduleKind k : {ScheduleKind::DualPipe, ScheduleKind::Chimera})
    for (int ranks : {2, 4}) {
      GenOptions opts;
      opts.ranks = ranks;
      opts.microbatches = std::max(8, minMicrobatches(k, ranks));
      Expected<Schedule> g = generate(k, opts);
      ASSERT_TRUE(g) << scheduleKindName(k) << ": " << g.message();
      Schedule s = *g;
      ASSERT_TRUE(insertComm(s).isOk()) << scheduleKindName(k);
      CostModel cost = costs(1, 1, 1, 0.25);
      Expected<SimResult> before = simulate(s, cost);
      ASSERT_TRUE(before) << before.message();
      cost.gradBytes = 3;
      cost.gradReduceBytesPerTime = 2;
      cost.gradReduceLatency = 0.25;
      Expected<SimResult> after = simulate(s, cost);
      ASSERT_TRUE(after) << after.message();
      const double gr = 0.25 + 2 * 3 / 2.0; // two stages a rank
      std::string what = std::string(scheduleKindName(k)) + " on " +
                         std::to_string(ranks) + " ranks";
      EXPECT_NEAR(after->makespan, before->makespan + gr, 1e-9) << what;
      double busy = 0;
      for (int r = 0; r < ranks; ++r) {
        EXPECT_DOUBLE_EQ(after->ranks[r].busy, before->ranks[r].busy) << what;
        EXPECT_DOUBLE_EQ(after->ranks[r].lastEnd, before->ranks[r].lastEnd)
            << what;
        EXPECT_NEAR(after->ranks[r].exposedComm,
                    before->ranks[r].exposedComm + gr, 1e-9)
            << what;
        busy += after->ranks[r].busy;
      }
      EXPECT_NEAR(after->bubbleRate, 1 - busy / (ranks * after->makespan),
                  1e-12)
          << what;
      // The GRADREDUCE's interval spans the wait and the exchange.
      const Interval &last = after->intervals[s.programs[0].size() - 1];
      EXPECT_EQ(s.programs[0][last.actionIndex].kind, ActionKind::GradReduce);
      EXPECT_NEAR(last.end, after->makespan, 1e-9) << what;
    }
}

TEST(SimulatorTest, DeadlockNamesRankAndStep) {
  Schedule s = emptyLinear("dl", 2, 2);
  s.programs[0] = {cF(0, 0), cBW(0, 0), cF(0, 1), cBW(0, 1)};
  s.programs[1] = {cF(1, 1), cF(1, 0), cBW(1, 0), cBW(1, 1)};
  Expected<SimResult> r = simulate(s, CostModel());
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("rank 0, step 1: deadlock: BW0.0 waits for "
                             "BW1.0 (rank 1, step 2); rank 1 is blocked at "
                             "step 0: F1.1"),
            std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find("blocked ranks: r0@1 r1@0"), std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find("  -> 1: BW0.0"), std::string::npos);
}

TEST(SimulatorTest, RecvWithoutSendDeadlocks) {
  Schedule s = handGPipe(2, 1);
  insertCommByTime(s);
  s.programs[0].erase(s.programs[0].begin() + 1); // drop SEND act F0.0
  Expected<SimResult> r = simulate(s, CostModel());
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("rank 0, step 1: deadlock: RECV grad"),
            std::string::npos)
      << r.message();
}

TEST(SimulatorTest, MissingProducer) {
  Schedule s = handGPipe(2, 2);
  s.programs[1].erase(s.programs[1].begin()); // no F1.0
  Expected<SimResult> r = simulate(s, CostModel());
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("missing producer: BW1.0 needs F1.0"),
            std::string::npos)
      << r.message();
}

TEST(SimulatorTest, ProducerLaterOnSameRank) {
  Schedule s = handZB(2, 2, 1);
  std::swap(s.programs[1][1], s.programs[1][2]); // W before its B?
  s.programs[0] = {cF(0, 0), cF(0, 1), cW(0, 0), cB(0, 0), cB(0, 1),
                   cW(0, 1)};
  Expected<SimResult> r = simulate(s, CostModel());
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("runs later on this rank"), std::string::npos)
      << r.message();
}

TEST(SimulatorTest, CommErrors) {
  Schedule base = handGPipe(2, 1);
  insertCommByTime(base);
  {
    Schedule s = base; // payload mismatch on the channel
    s.programs[1][0].work.mb = 0;
    s.programs[1][0].payload = Payload::Gradient;
    Expected<SimResult> r = simulate(s, CostModel());
    ASSERT_FALSE(r);
    EXPECT_NE(r.message().find("but the matching send"), std::string::npos)
        << r.message();
  }
  {
    Schedule s = base; // compute with a remote input but no Recv
    s.programs[1].erase(s.programs[1].begin());
    Expected<SimResult> r = simulate(s, CostModel());
    ASSERT_FALSE(r);
    EXPECT_NE(r.message().find("has not received it"), std::string::npos)
        << r.message();
  }
  {
    Schedule s = base; // send before producing
    std::swap(s.programs[0][0], s.programs[0][1]);
    Expected<SimResult> r = simulate(s, CostModel());
    ASSERT_FALSE(r);
    EXPECT_NE(r.message().find("before producing it"), std::string::npos);
  }
  {
    Schedule s = base;
    s.programs[0][1].peer = 0;
    Expected<SimResult> r = simulate(s, CostModel());
    ASSERT_FALSE(r);
    EXPECT_NE(r.message().find("peer rank 0 is out of range or this rank"),
              std::string::npos);
  }
}

TEST(SimulatorTest, StructuralErrors) {
  Schedule s = handGPipe(2, 1);
  s.programs[0][0].work.mb = 5;
  EXPECT_FALSE(simulate(s, CostModel()));
  s = handGPipe(2, 1);
  s.programs[0][0].work.stage = 1;
  Expected<SimResult> r = simulate(s, CostModel());
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("belongs on rank 1"), std::string::npos);
  s = handGPipe(2, 1);
  s.programs.pop_back();
  EXPECT_FALSE(simulate(s, CostModel()));
}

TEST(SimulatorTest, IntervalsCoverEveryActionInOrder) {
  Schedule s = handZB(4, 8, 1);
  insertCommByTime(s);
  Expected<SimResult> r = simulate(s, costs(1, 1, 1, 0.1));
  ASSERT_TRUE(r);
  size_t total = 0;
  for (const auto &p : s.programs)
    total += p.size();
  ASSERT_EQ(r->intervals.size(), total);
  for (size_t i = 1; i < r->intervals.size(); ++i) {
    const Interval &a = r->intervals[i - 1], &b = r->intervals[i];
    if (a.rank == b.rank) {
      EXPECT_EQ(a.actionIndex + 1, b.actionIndex);
      EXPECT_LE(a.end, b.start + 1e-12);
    }
  }
}

// A front end that prints less keeps fewer intervals; every other result
// is the same.
TEST(SimulatorTest, KeptIntervalsAreASubsetWithTheSameResult) {
  Schedule s = handZB(4, 8, 1);
  insertCommByTime(s);
  CostModel c = costs(1, 2, 1, 0.1);
  Expected<SimResult> all = simulate(s, c);
  Expected<SimResult> compute = simulate(s, c, {SimIntervals::Compute});
  Expected<SimResult> none = simulate(s, c, {SimIntervals::None});
  ASSERT_TRUE(all && compute && none);
  std::vector<Interval> expected;
  for (const Interval &iv : all->intervals)
    if (!s.programs[iv.rank][iv.actionIndex].isComm())
      expected.push_back(iv);
  ASSERT_EQ(compute->intervals.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(compute->intervals[k].rank, expected[k].rank);
    EXPECT_EQ(compute->intervals[k].actionIndex, expected[k].actionIndex);
    EXPECT_EQ(compute->intervals[k].start, expected[k].start);
    EXPECT_EQ(compute->intervals[k].end, expected[k].end);
  }
  EXPECT_TRUE(none->intervals.empty());
  for (const Expected<SimResult> *r : {&compute, &none}) {
    EXPECT_EQ((*r)->makespan, all->makespan);
    EXPECT_EQ((*r)->bubbleRate, all->bubbleRate);
    EXPECT_EQ((*r)->zbBubbleRate, all->zbBubbleRate);
    ASSERT_EQ((*r)->ranks.size(), all->ranks.size());
    for (size_t k = 0; k < all->ranks.size(); ++k) {
      EXPECT_EQ((*r)->ranks[k].busy, all->ranks[k].busy);
      EXPECT_EQ((*r)->ranks[k].peakMemory, all->ranks[k].peakMemory);
      EXPECT_EQ((*r)->ranks[k].exposedComm, all->ranks[k].exposedComm);
    }
  }
}

// A verified schedule simulates to the same result without the work
// locator and the checks (SimOptions::verified), B and BW alike.
TEST(SimulatorTest, VerifiedReplayIsTheSame) {
  for (ScheduleKind k : {ScheduleKind::ZBV, ScheduleKind::DualPipe,
                         ScheduleKind::OneFOneB, ScheduleKind::Interleaved}) {
    GenOptions g;
    g.ranks = 4;
    g.microbatches = 8;
    auto gen = generate(k, g);
    ASSERT_TRUE(gen) << gen.message();
    Schedule s = gen.take();
    CostModel c = costs(1, 2, 1, 0.3);
    ASSERT_TRUE(insertComm(s, c));
    SimOptions vo;
    vo.verified = true;
    Expected<SimResult> a = simulate(s, c), b = simulate(s, c, vo);
    ASSERT_TRUE(a && b) << scheduleKindName(k);
    EXPECT_EQ(a->makespan, b->makespan) << scheduleKindName(k);
    ASSERT_EQ(a->intervals.size(), b->intervals.size());
    for (size_t i = 0; i < a->intervals.size(); ++i) {
      EXPECT_EQ(a->intervals[i].start, b->intervals[i].start);
      EXPECT_EQ(a->intervals[i].end, b->intervals[i].end);
    }
    for (size_t r = 0; r < a->ranks.size(); ++r) {
      EXPECT_EQ(a->ranks[r].busy, b->ranks[r].busy);
      EXPECT_EQ(a->ranks[r].peakMemory, b->ranks[r].peakMemory);
      EXPECT_EQ(a->ranks[r].exposedComm, b->ranks[r].exposedComm);
    }
  }
}

// Speed is measured by benchmarks/ScheduleBench.cpp; these check that large
// schedules simulate at all.
TEST(SimulatorTest, LargeScheduleSimulates) {
  // 64 ranks x 1024 microbatches of ZB-H1: ~196k actions.
  Schedule s = handZB(64, 1024, 1);
  Expected<SimResult> r = simulate(s, costs(1, 1, 1, 0.1));
  ASSERT_TRUE(r) << r.message();
}

TEST(SimulatorTest, GeneratedDualPipeVSimulates) {
  // DualPipeV, 64 ranks x 1024 microbatches: ~200k actions.
  GenOptions opts;
  opts.ranks = 64;
  opts.microbatches = 1024;
  Expected<Schedule> s = generate(ScheduleKind::DualPipeV, opts);
  ASSERT_TRUE(s) << s.message();
  size_t n = 0;
  for (const auto &p : s->programs)
    n += p.size();
  EXPECT_GT(n, 100000u);
  CostModel cost = costs(1, 1, 1, 0.1);
  Expected<SimResult> r = simulate(*s, cost);
  ASSERT_TRUE(r) << r.message();
  // With messages too; placed for these costs, they do not stretch it.
  ASSERT_TRUE(insertComm(*s, cost).isOk());
  Expected<SimResult> rc = simulate(*s, cost);
  ASSERT_TRUE(rc) << rc.message();
  EXPECT_NEAR(rc->makespan, r->makespan, 1e-9);
  RecordProperty("computeOnlyActions", static_cast<int>(n));
}

TEST(SimulatorTest, GeneratedMatchHandBuilt) {
  // The generators agree with the docs/background.md definitions on timing.
  struct Case {
    ScheduleKind kind;
    Schedule hand;
  };
  for (int p : {2, 4})
    for (int m : {2 * p, 3 * p}) {
      Case cases[] = {{ScheduleKind::OneFOneB, hand1F1B(p, m)},
                      {ScheduleKind::ZBH1, handZB(p, m, 1)},
                      {ScheduleKind::ZBH2, handZB(p, m, 2)}};
      for (const Case &c : cases) {
        GenOptions opts;
        opts.ranks = p;
        opts.microbatches = m;
        Expected<Schedule> g = generate(c.kind, opts);
        ASSERT_TRUE(g) << g.message();
        CostModel cost = costs(2, 2, 1, 0.25);
        Expected<SimResult> a = simulate(*g, cost), b = simulate(c.hand, cost);
        ASSERT_TRUE(a && b);
        EXPECT_DOUBLE_EQ(a->makespan, b->makespan) << scheduleKindName(c.kind);
        EXPECT_DOUBLE_EQ(a->zbBubbleRate, b->zbBubbleRate);
      }
    }
}

TEST(SimulatorTest, GeneratedWithCommMatchComputeOnly) {
  // With T_comm = 0 messages cost nothing: same makespan either way.
  const ScheduleKind kinds[] = {
      ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
      ScheduleKind::ZBH1,  ScheduleKind::ZBH2,     ScheduleKind::ZBV,
      ScheduleKind::DualPipe, ScheduleKind::DualPipeV, ScheduleKind::Chimera};
  for (ScheduleKind k : kinds) {
    GenOptions opts;
    opts.ranks = 4;
    opts.microbatches = std::max(16, minMicrobatches(k, 4));
    Expected<Schedule> g = generate(k, opts);
    ASSERT_TRUE(g) << scheduleKindName(k) << ": " << g.message();
    CostModel cost = costs(1, 1, 1);
    Expected<SimResult> plain = simulate(*g, cost);
    ASSERT_TRUE(plain) << scheduleKindName(k) << ": " << plain.message();
    Schedule withMsgs = *g;
    ASSERT_TRUE(insertComm(withMsgs).isOk()) << scheduleKindName(k);
    Expected<SimResult> msgs = simulate(withMsgs, cost);
    ASSERT_TRUE(msgs) << scheduleKindName(k) << ": " << msgs.message();
    EXPECT_NEAR(plain->makespan, msgs->makespan, 1e-9) << scheduleKindName(k);
  }
}

TEST(SimulatorTest, IntervalsOfMillionsOfActionsAreWrittenOnceEach) {
  // Over 64 MB of intervals: the array is not cleared first and is mapped
  // in on another core during the replay. Every entry must still be the
  // replay's: every action appears exactly once (an entry never written
  // would show up as a duplicate or out of range), and the compute ones equal a
  // compute-only run's (under 64 MB: nothing maps it in beside the
  // replay).
  Schedule s = generatedZbv(150000);
  ASSERT_EQ(s.numRanks(), 2);
  CostModel c = costs(1, 1.5, 0.5, 0.1);
  Expected<SimResult> all = simulate(s, c, {SimIntervals::All});
  Expected<SimResult> compute = simulate(s, c, {SimIntervals::Compute});
  ASSERT_TRUE(all && compute);
  ASSERT_GT(all->intervals.size() * sizeof(Interval), size_t(64) << 20);
  std::vector<std::vector<uint8_t>> seen(2);
  for (int r = 0; r < 2; ++r)
    seen[r].assign(s.programs[r].size(), 0);
  size_t k = 0;
  for (const Interval &iv : all->intervals) {
    ASSERT_TRUE(iv.rank == 0 || iv.rank == 1);
    ASSERT_LT(iv.actionIndex, s.programs[iv.rank].size());
    ASSERT_EQ(seen[iv.rank][iv.actionIndex]++, 0);
    ASSERT_LE(iv.start, iv.end);
    if (s.programs[iv.rank][iv.actionIndex].isComm())
      continue;
    ASSERT_LT(k, compute->intervals.size());
    const Interval &cv = compute->intervals[k++];
    ASSERT_EQ(cv.rank, iv.rank);
    ASSERT_EQ(cv.actionIndex, iv.actionIndex);
    ASSERT_EQ(cv.start, iv.start);
    ASSERT_EQ(cv.end, iv.end);
  }
  EXPECT_EQ(k, compute->intervals.size());
}

} // namespace

namespace {
bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}
} // namespace

// Issue 43: costs whose sums overflow are refused by every replay (the
// simulator, message insertion, the verifier, the automatic scheduler)
// instead of computed with: std::bad_alloc on an infinite time, a correct
// schedule called wrong.
TEST(SimulatorTest, OverflowingCostsAreRefused) {
  Schedule s = *generate(ScheduleKind::OneFOneB, {2, 4});
  CostModel huge = costs(1e308, 1e308, 1);
  Status st = checkCosts(huge, s);
  ASSERT_FALSE(st.isOk());
  EXPECT_TRUE(contains(st.message(), "cost model: the times overflow"))
      << st.message();
  EXPECT_FALSE(simulate(s, huge).isOk());
  Schedule c = s;
  Status ins = insertComm(c, huge);
  ASSERT_FALSE(ins.isOk());
  EXPECT_TRUE(contains(ins.message(), "cost model:")) << ins.message();
  VerifyOptions vo;
  vo.cost = huge;
  EXPECT_FALSE(verify(s, vo).isOk());
  // An all-to-all time that overflows only once multiplied by the layers.
  CostModel a2a = costs(1, 1, 1);
  a2a.tA2A = 1e308;
  a2a.moeLayersPerStage = 2;
  EXPECT_TRUE(contains(checkCosts(a2a, s).message(),
                       "one action (an overlapped pair with its all-to-alls, "
                       "plus tcomm) takes more than the largest number"));
  // Per-field checks name the field and the stage.
  CostModel bad = costs(1, 1, 1);
  bad.tbStage = {1, std::nan("")};
  EXPECT_TRUE(contains(checkCosts(bad, s).message(),
                       "cost model: B time of stage 1 is nan"));
  bad = costs(1, -1, 1);
  EXPECT_TRUE(contains(checkCosts(bad, s).message(),
                       "cost model: B time (tb) is -1"));
  bad = costs(1, 1, 1);
  bad.memB = 1e308;
  EXPECT_TRUE(contains(checkCosts(bad, s).message(),
                       "the memory deltas overflow"));
  // Below the limit: finite results.
  CostModel big = costs(1e20, 1e20, 1e20, 1e20);
  auto r = simulate(s, big);
  ASSERT_TRUE(r.isOk()) << r.message();
  EXPECT_TRUE(std::isfinite(r->makespan));
  // The automatic scheduler refuses them too.
  AutoOptions ao;
  ao.ranks = 2;
  ao.microbatches = 4;
  ao.cost = huge;
  auto a = autoSchedule(ao);
  ASSERT_FALSE(a.isOk());
  EXPECT_TRUE(contains(a.message(), "auto schedule: cost model:"))
      << a.message();
}

// The replay times every MoE layer of every F and backward: a layer count
// beyond a model's (2^14), or actions x layers beyond kMaxMoELayerSteps, is
// refused (950 million layers on 20 actions ran the fuzzer out of memory).
TEST(SimulatorTest, MoELayerCountsAreBounded) {
  Schedule s = *generate(ScheduleKind::OneFOneB, {2, 4});
  CostModel c = costs(1, 1, 1);
  c.tA2A = 0.1;
  c.moeLayersPerStage = 950667434;
  Status st = checkCosts(c, s);
  EXPECT_TRUE(contains(st.message(), "cost model: MoE layers per stage is "
                                     "950667434; it must be in [0, 16384]"))
      << st.message();
  EXPECT_FALSE(simulate(s, c).isOk());
  c.moeLayersPerStage = 0;
  c.moeLayersStage = {2, -1};
  EXPECT_TRUE(contains(checkCosts(c, s).message(),
                       "MoE layers of stage 1 is -1"));
  c.moeLayersStage.clear();
  c.moeLayersPerStage = 16384;
  EXPECT_TRUE(checkCosts(c, s).isOk()); // 16 actions x 16384
  EXPECT_TRUE(contains(checkCosts(c, 2, 5000).message(),
                       "5000 actions x 16384 MoE layers a stage are more "
                       "per-layer steps than a replay takes (67108864)"));
}

// --- Activation offload's OFFLOAD / RELOAD ----------------------------------

// The actions replay the memory of the plan they state (offloadGap's
// peaks), and with free copies (hostBytesPerTime 0) the times too.
TEST(SimulatorTest, OffloadActionsReplayTheGapsMemory) {
  for (ScheduleKind k : {ScheduleKind::OneFOneB, ScheduleKind::ZBV,
                         ScheduleKind::DualPipe, ScheduleKind::Interleaved})
    for (int gap : {kOffloadGapAuto, kOffloadGapAll}) {
      GenOptions o;
      o.ranks = 4;
      o.microbatches = 8;
      Expected<Schedule> g = generate(k, o);
      ASSERT_TRUE(g);
      Schedule s = *g;
      ASSERT_TRUE(insertComm(s));
      Schedule act = s;
      ASSERT_TRUE(insertOffload(act, gap));
      CostModel byGap;
      byGap.offloadGap = gap;
      Expected<SimResult> a = simulate(s, byGap), b = simulate(act, {});
      ASSERT_TRUE(a) << a.status().message();
      ASSERT_TRUE(b) << b.status().message();
      EXPECT_DOUBLE_EQ(a->makespan, b->makespan);
      for (size_t r = 0; r < a->ranks.size(); ++r) {
        EXPECT_DOUBLE_EQ(a->ranks[r].peakMemory, b->ranks[r].peakMemory);
        EXPECT_EQ(b->ranks[r].copyBusy, 0);
        EXPECT_EQ(b->ranks[r].exposedCopy, 0);
      }
    }
}

// One rank, GPipe over 2 microbatches, every stash offloaded; each copy
// takes 1 (M_B 1 over a bandwidth of 1): F0.0 [0,1], its copy out [1,2]
// and back [2,3] on the copy channel; F0.1 [1,2], out [3,4], back [4,5];
// BW0.0 waits for its stash from 2 to 3 (exposed 1), runs [3,5]; BW0.1
// [5,7].
TEST(SimulatorTest, OffloadCopiesTakeTime) {
  Schedule s = handGPipe(1, 2);
  ASSERT_TRUE(insertOffload(s, kOffloadGapAll));
  ASSERT_EQ(toString(s.programs[0][2]), "RELOAD F0.0");
  CostModel c;
  c.hostBytesPerTime = 1;
  Expected<SimResult> r = simulate(s, c);
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_DOUBLE_EQ(r->makespan, 7);
  EXPECT_DOUBLE_EQ(r->ranks[0].copyBusy, 4);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedCopy, 1);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedComm, 1);
  // The copies as spans on the rank's copy channel, in time order.
  std::vector<std::pair<double, double>> spans;
  for (const CommInterval &ci : r->commIntervals)
    if (ci.kind == CommInterval::Copy)
      spans.emplace_back(ci.start, ci.end);
  EXPECT_EQ(spans, (std::vector<std::pair<double, double>>{
                       {1, 2}, {2, 3}, {3, 4}, {4, 5}}));
  // A copy out slower than the compute action after it holds the rank at
  // that action's end (the runtime frees the stash's device memory there).
  c.hostBytesPerTime = 1.0 / 3;
  r = simulate(s, c);
  ASSERT_TRUE(r);
  // Out F0.0 [1,4], back F0.0 [4,7], out F0.1 [7,10] (posted at 4), back
  // F0.1 [10,13]; after F0.1 [1,2] the rank waits for F0.0's copy out
  // (to 4); BW0.0 waits for 7, runs [7,9], then the rank waits for F0.1's
  // copy out (to 10); BW0.1 waits for 13, runs [13,15].
  EXPECT_DOUBLE_EQ(r->makespan, 15);
  EXPECT_DOUBLE_EQ(r->ranks[0].copyBusy, 12);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedCopy, 2 + 3 + 1 + 3);
  // Costs are checked.
  c.hostBytesPerTime = -1;
  EXPECT_TRUE(contains(simulate(s, c).status().message(),
                       "host copy bandwidth is -1"));
}
