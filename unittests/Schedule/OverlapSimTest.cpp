//===- OverlapSimTest.cpp - The simulator's communication model -----------===//
//
// All-to-all (expert parallelism) and P2P on a separate comm resource;
// overlapped F&B pairs fused in DeepSeek's per-layer order.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Simulator.h"

#include "HandSchedules.h"

#include <gtest/gtest.h>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testing;

namespace {

/// One rank, one stage, two microbatches: F0, [F1 & BW0], BW1.
Schedule handPair() {
  Schedule s = emptyLinear("pair", 1, 2);
  s.programs[0] = {cF(0, 0),
                   Action::overlap(wk(WorkKind::F, 0, 1),
                                   wk(WorkKind::BW, 0, 0)),
                   cBW(0, 1)};
  return s;
}

CostModel moe(double a2a, bool overlap, bool fuse = true, int layers = 1) {
  CostModel c;
  c.tf = 2;
  c.tb = 2;
  c.tw = 2;
  c.tA2A = a2a;
  c.moeLayersPerStage = layers;
  c.overlapComm = overlap;
  c.fusePairs = fuse;
  return c;
}

Schedule withComm(ScheduleKind k, int ranks, int mb, const CostModel &c) {
  GenOptions g;
  g.ranks = ranks;
  g.microbatches = mb;
  Expected<Schedule> s = generate(k, g);
  EXPECT_TRUE(s) << s.message();
  Schedule out = s.take();
  Status st = insertComm(out, c);
  EXPECT_TRUE(st) << st.message();
  return out;
}

void expectSame(const SimResult &a, const SimResult &b) {
  EXPECT_EQ(a.makespan, b.makespan);
  EXPECT_EQ(a.bubbleRate, b.bubbleRate);
  ASSERT_EQ(a.intervals.size(), b.intervals.size());
  for (size_t i = 0; i < a.intervals.size(); ++i) {
    EXPECT_EQ(a.intervals[i].start, b.intervals[i].start);
    EXPECT_EQ(a.intervals[i].end, b.intervals[i].end);
  }
  for (size_t r = 0; r < a.ranks.size(); ++r) {
    EXPECT_EQ(a.ranks[r].busy, b.ranks[r].busy);
    EXPECT_EQ(a.ranks[r].exposedComm, b.ranks[r].exposedComm);
    EXPECT_EQ(b.ranks[r].exposedA2A, 0);
  }
}

TEST(OverlapSimTest, NoAllToAllChangesNothing) {
  CostModel base;
  base.tf = 1.5;
  base.tb = 1.2;
  base.tw = 0.7;
  base.tcomm = 0.1;
  CostModel layersOnly = base;
  layersOnly.moeLayersPerStage = 4; // tA2A = 0
  CostModel a2aOnly = base;
  a2aOnly.tA2A = 3; // no MoE layers
  for (ScheduleKind k :
       {ScheduleKind::OneFOneB, ScheduleKind::DualPipe, ScheduleKind::DualPipeV})
    for (bool comm : {false, true}) {
      GenOptions g;
      g.ranks = 4;
      g.microbatches = 12;
      Schedule s = generate(k, g).take();
      if (comm) {
        ASSERT_TRUE(insertComm(s, base));
      }
      Expected<SimResult> r0 = simulate(s, base);
      Expected<SimResult> r1 = simulate(s, layersOnly);
      Expected<SimResult> r2 = simulate(s, a2aOnly);
      ASSERT_TRUE(r0 && r1 && r2);
      expectSame(*r0, *r1);
      expectSame(*r0, *r2);
      EXPECT_TRUE(r1->commIntervals.empty());
    }
}

TEST(OverlapSimTest, HandPairOneLayer) {
  // tf = tb = tw = 2, one MoE layer, attention half of each compute:
  // F = attn 1, dispatch a, mlp 1, combine a; BW = combine a, mlp 1 +
  // mlpW 1, dispatch a, attn 1 + attnW 1.
  // Fused pair, a = 1 (per-layer order, compute | comm):
  //   comm:    combB[0,1] dispF[1,2] dispB[2,3] combF[4,5]
  //   compute: attnF[0,1] mlpB[1,2] mlpW[2,3] mlpF[3,4] attnB[4,5]
  //            attnW[5,6]               -> 6, nothing exposed.
  // F0 = 2 + 2a and BW1 = 4 + 2a run serially (all-to-alls exposed).
  // a = 3: combB[0,3] dispF[3,6] dispB[6,9] combF[9,12]; compute
  //   attnF[0,1] mlpB[3,4] mlpW[4,5] mlpF[6,7] attnB[9,10] attnW[10,11]
  //   -> 12, exposed 12 - 6 = 6.
  for (double a : {1.0, 3.0}) {
    double pairT = a == 1 ? 6 : 12;
    double f0 = 2 + 2 * a, bw1 = 4 + 2 * a;
    Expected<SimResult> fused = simulate(handPair(), moe(a, true, true));
    ASSERT_TRUE(fused) << fused.message();
    ASSERT_EQ(fused->intervals.size(), 3u);
    EXPECT_DOUBLE_EQ(fused->intervals[1].end - fused->intervals[1].start,
                     pairT);
    EXPECT_DOUBLE_EQ(fused->makespan, f0 + pairT + bw1);
    EXPECT_DOUBLE_EQ(fused->ranks[0].busy, 12);
    EXPECT_DOUBLE_EQ(fused->ranks[0].exposedA2A, 2 * a + (pairT - 6) + 2 * a);
    EXPECT_DOUBLE_EQ(fused->ranks[0].commBusy, 8 * a);
    // Without fusion (and in the blocking model) every all-to-all is
    // exposed: the pair is F then BW, 2 + 2a + 4 + 2a.
    for (bool overlap : {true, false}) {
      Expected<SimResult> serial =
          simulate(handPair(), moe(a, overlap, /*fuse=*/false));
      ASSERT_TRUE(serial);
      EXPECT_DOUBLE_EQ(serial->makespan, f0 + (6 + 4 * a) + bw1);
      EXPECT_DOUBLE_EQ(serial->ranks[0].exposedA2A, 8 * a);
      EXPECT_DOUBLE_EQ(serial->ranks[0].busy, 12);
      EXPECT_DOUBLE_EQ(serial->exposedA2A, 8 * a);
    }
  }
}

TEST(OverlapSimTest, HandPairTwoLayers) {
  // Two layers, a = 1: per layer attn/mlp 0.5, W parts 0.5. Layer 0:
  //   comm combB[0,1] dispF[1,2] dispB[2,3] combF[3,4]
  //   compute attnF[0,.5] mlpB[1,1.5] mlpW[1.5,2] mlpF[2,2.5] attnB[3,3.5]
  //   attnW[3.5,4]
  // Layer 1: combB needs attnB(0) 3.5, comm free 4 -> [4,5]; attnF needs
  //   combF(0) 4 -> [4,4.5]; mlpB [5,5.5]; dispF [5,6]; dispB [6,7];
  //   mlpW [5.5,6]; mlpF [6,6.5]; attnB [7,7.5]; attnW [7.5,8];
  //   combF needs mlpF 6.5, comm free 7 -> [7,8]. Pair = 8.
  Expected<SimResult> r = simulate(handPair(), moe(1, true, true, 2));
  ASSERT_TRUE(r) << r.message();
  EXPECT_DOUBLE_EQ(r->intervals[1].end - r->intervals[1].start, 8);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposedA2A, 4 + 2 + 4);
}

TEST(OverlapSimTest, ExposedNeverNegativeFusionNeverSlower) {
  for (ScheduleKind k : {ScheduleKind::DualPipe, ScheduleKind::DualPipeV,
                         ScheduleKind::OneFOneB})
    for (int p : {2, 4, 8})
      for (double a : {0.0, 0.25, 0.5, 1.0, 2.0})
        for (double tc : {0.0, 0.1}) {
          CostModel c = moe(a, true, true, 2);
          c.tf = 1;
          c.tb = 1;
          c.tw = 0.6;
          c.tcomm = tc;
          Schedule s = withComm(k, p, 2 * p + 4, c);
          CostModel nf = c;
          nf.fusePairs = false;
          CostModel blocking = c;
          blocking.overlapComm = false;
          Expected<SimResult> fr = simulate(s, c);
          Expected<SimResult> nr = simulate(s, nf);
          Expected<SimResult> br = simulate(s, blocking);
          ASSERT_TRUE(fr && nr && br) << fr.message() << nr.message();
          for (const SimResult *x : {&*fr, &*nr, &*br}) {
            for (const RankStats &st : x->ranks) {
              EXPECT_GE(st.exposedA2A, -1e-12);
              EXPECT_GE(st.exposedP2P, -1e-12);
              EXPECT_GE(st.exposedComm, st.exposedA2A - 1e-9);
            }
            for (const CommInterval &ci : x->commIntervals)
              EXPECT_GE(ci.end, ci.start);
          }
          EXPECT_LE(fr->makespan, nr->makespan + 1e-9)
              << scheduleKindName(k) << " p=" << p << " a=" << a;
          EXPECT_LE(fr->exposedA2A, nr->exposedA2A + 1e-9);
          if (tc == 0) {
            EXPECT_LE(fr->makespan, br->makespan + 1e-9);
          }
          if (k == ScheduleKind::OneFOneB) { // no pairs: fusion is moot
            EXPECT_DOUBLE_EQ(fr->makespan, nr->makespan);
          }
        }
}

TEST(OverlapSimTest, AsyncRecvExposedOnlyWhenConsumerWaits) {
  // 2 ranks, F0 on rank 0 sends to rank 1; with overlapComm the receive is
  // posted at once and the wait shows up at F1.0: exposed = tcomm.
  CostModel c;
  c.tcomm = 0.5;
  c.overlapComm = true;
  Schedule s = withComm(ScheduleKind::OneFOneB, 2, 2, c);
  Expected<SimResult> r = simulate(s, c);
  ASSERT_TRUE(r) << r.message();
  CostModel b = c;
  b.overlapComm = false;
  Expected<SimResult> rb = simulate(s, b);
  ASSERT_TRUE(rb);
  // Same makespan as the blocking model here (one message at a time).
  EXPECT_DOUBLE_EQ(r->makespan, rb->makespan);
  EXPECT_DOUBLE_EQ(r->ranks[1].exposedP2P, rb->ranks[1].exposedP2P);
  EXPECT_GT(r->ranks[1].exposedP2P, 0);
  bool sawP2P = false;
  for (const CommInterval &ci : r->commIntervals)
    sawP2P |= ci.kind == CommInterval::P2P;
  EXPECT_TRUE(sawP2P);
}

TEST(OverlapSimTest, ExportsDrawCommLane) {
  CostModel c = moe(1, true, true, 2);
  Schedule s = withComm(ScheduleKind::DualPipeV, 4, 8, c);
  Expected<SimResult> r = simulate(s, c);
  ASSERT_TRUE(r);
  std::string svg = exportSvg(s, *r);
  EXPECT_NE(svg.find("all-to-all"), std::string::npos);
  std::string tr = exportTrace(s, *r);
  EXPECT_NE(tr.find("\"a2a"), std::string::npos);
}

} // namespace
