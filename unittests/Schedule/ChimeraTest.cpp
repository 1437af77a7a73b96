//===- ChimeraTest.cpp - Tests of the Chimera generator -------------------===//
//
// The basic unit against the paper's figure (Li and Hoefler, SC'21, figure
// 3: D = 4, N = 4), direct concatenation for N > D, the bubble the paper
// claims (D/2 - 1 bubbles of one F + one backward per worker, against
// 1F1B's D - 1) measured with the simulator, messages and the verifier, and
// the request errors.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Schedule/Verify.h"

#include "GenTestUtil.h"

#include <gtest/gtest.h>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testutil;

namespace {

Expected<Schedule> chimera(int d, int n) {
  GenOptions o;
  o.ranks = d;
  o.microbatches = n;
  return generate(ScheduleKind::Chimera, o);
}

CostModel unitCosts(double tf, double tbw) {
  CostModel c;
  c.tf = tf;
  c.tb = tbw / 2;
  c.tw = tbw / 2;
  c.tbw = tbw;
  return c;
}

// The paper's figure 3, worker by worker (F, then the full backward; the up
// pipeline is copy 1, its stage s on worker D-1-s). The first two
// microbatches go down (0, 1), the other two up (here 0@1, 1@1: numbered
// per copy). Worker 0 runs F0 F1 of the down pipeline, then turns the up
// pipeline's microbatches around at its last stage, then the down
// backwards; the middle workers alternate the two directions.
TEST(Chimera, BasicUnitMatchesThePaper) {
  Expected<Schedule> s = chimera(4, 4);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->name, "chimera");
  EXPECT_EQ(s->numMicrobatches, 2);
  EXPECT_EQ(s->placement.numCopies, 2);
  EXPECT_EQ(s->placement.rank(1, 0), 3);
  const char *expected[] = {
      "F0.0 F0.1 F3.0@1 BW3.0@1 F3.1@1 BW3.1@1 BW0.0 BW0.1",
      "F1.0 F2.0@1 F1.1 F2.1@1 BW2.0@1 BW1.0 BW2.1@1 BW1.1",
      "F1.0@1 F2.0 F1.1@1 F2.1 BW2.0 BW1.0@1 BW2.1 BW1.1@1",
      "F0.0@1 F0.1@1 F3.0 BW3.0 F3.1 BW3.1 BW0.0@1 BW0.1@1",
  };
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(programText(*s, r), expected[r]) << "rank " << r;
}

// N = 2D: two units; the second unit's first forward on rank 0 fills the
// idle cell before the first unit's last backward.
TEST(Chimera, DirectConcatenation) {
  Expected<Schedule> s = chimera(4, 8);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->numMicrobatches, 4);
  EXPECT_EQ(programText(*s, 0),
            "F0.0 F0.1 F3.0@1 BW3.0@1 F3.1@1 BW3.1@1 BW0.0 F0.2 BW0.1 F0.3 "
            "F3.2@1 BW3.2@1 F3.3@1 BW3.3@1 BW0.2 BW0.3");
  // D = 2: no bubble cells at all, units back to back.
  s = chimera(2, 4);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(programText(*s, 0), "F0.0 F1.0@1 BW1.0@1 BW0.0 F0.1 F1.1@1 "
                                "BW1.1@1 BW0.1");
}

TEST(Chimera, StructureMessagesAndVerifier) {
  for (int d = 2; d <= 16; d += 2)
    for (int units = 1; units <= 4; ++units) {
      const int n = units * d;
      Expected<Schedule> s = chimera(d, n);
      ASSERT_TRUE(s) << s.message();
      ASSERT_EQ(checkComputeStructure(*s), "") << "D=" << d << " N=" << n;
      for (const auto &prog : s->programs)
        for (const Action &a : prog)
          ASSERT_TRUE(a.kind == ActionKind::Compute &&
                      (a.work.kind == WorkKind::F ||
                       a.work.kind == WorkKind::BW));
      Schedule c = *s;
      CostModel cost = unitCosts(1, 2);
      cost.tcomm = 0.25;
      ASSERT_TRUE(insertComm(c, cost).isOk()) << "D=" << d << " N=" << n;
      VerifyOptions vo;
      vo.cost = cost;
      Status v = verify(c, vo);
      ASSERT_TRUE(v.isOk()) << "D=" << d << " N=" << n << ": " << v.message();
      int reduces = 0;
      for (const auto &prog : c.programs)
        for (const Action &a : prog)
          reduces += a.kind == ActionKind::GradReduce;
      EXPECT_EQ(reduces, d); // one per rank: its two copies' stages
      ASSERT_TRUE(simulate(c, cost)) << "D=" << d << " N=" << n;
    }
}

// With F and the full backward equally long (the paper's cells), every
// rank idles D - 2 = (D/2 - 1)(T_F + T_BW): bubble ratio (D-2) / (2N+D-2),
// whatever N (direct concatenation adds no bubble between units); 1F1B on
// the same N idles (D - 1)(T_F + T_BW).
TEST(Chimera, BubbleIsHalfOf1F1B) {
  const CostModel cost = unitCosts(1, 1);
  for (int d = 2; d <= 16; d += 2)
    for (int units = 1; units <= 4; ++units) {
      const int n = units * d;
      Expected<Schedule> s = chimera(d, n);
      ASSERT_TRUE(s) << s.message();
      Expected<SimResult> sim = simulate(*s, cost);
      ASSERT_TRUE(sim) << sim.message();
      EXPECT_DOUBLE_EQ(sim->makespan, 2.0 * n + d - 2) << d << " " << n;
      EXPECT_NEAR(sim->bubbleRate, double(d - 2) / (2 * n + d - 2), 1e-12);
      for (const RankStats &rs : sim->ranks) {
        EXPECT_DOUBLE_EQ(rs.busy, 2.0 * n);
        EXPECT_DOUBLE_EQ(sim->makespan - rs.busy, (d / 2 - 1) * 2.0);
        // Activations: between D/2 + 1 and D stage units, as the paper says.
        EXPECT_GE(rs.peakMemory, d / 2 + 1 - 1e-9) << d << " " << n;
        EXPECT_LE(rs.peakMemory, d + 1e-9) << d << " " << n;
      }
      GenOptions o;
      o.ranks = d;
      o.microbatches = n;
      Expected<Schedule> f = generate(ScheduleKind::OneFOneB, o);
      ASSERT_TRUE(f);
      Expected<SimResult> fsim = simulate(*f, cost);
      ASSERT_TRUE(fsim);
      EXPECT_DOUBLE_EQ(fsim->makespan - fsim->ranks[0].busy, (d - 1) * 2.0);
    }
}

TEST(Chimera, Layout) {
  Expected<StageLayout> l = stageLayoutFor("chimera", 4);
  ASSERT_TRUE(l) << l.message();
  EXPECT_EQ(l->placement, "dual");
  EXPECT_EQ(l->stages, 4);
  EXPECT_EQ(minMicrobatches(ScheduleKind::Chimera, 6), 6);
  EXPECT_EQ(parseScheduleKind("chimera"), ScheduleKind::Chimera);
  EXPECT_NE(scheduleKindNames().find("chimera"), std::string::npos);
  l = stageLayoutFor("chimera", 3);
  ASSERT_FALSE(l);
  EXPECT_NE(l.message().find("chimera needs an even number of ranks"),
            std::string::npos)
      << l.message();
}

TEST(Chimera, InvalidRequests) {
  struct Bad {
    int ranks, mb;
    const char *expect;
  } cases[] = {
      {3, 6, "chimera needs an even number of ranks (a down and an up "
             "pipeline of D/2 microbatches each per unit), got 3"},
      {5, 10, "even number of ranks"},
      {4, 6, "chimera needs the microbatch count to be a multiple of the "
             "rank count (units of D microbatches, D/2 per direction, "
             "concatenated), got 6 microbatches for 4 ranks"},
      {4, 2, "got 2 microbatches for 4 ranks"},
      {8, 12, "multiple of the rank count"},
      {1, 2, "chimera needs at least 2 ranks, got 1"},
      {4, 0, "chimera needs at least 1 microbatch, got 0"},
      {1 << 15, 1 << 20, "too large"},
  };
  for (const Bad &c : cases) {
    Expected<Schedule> s = chimera(c.ranks, c.mb);
    ASSERT_FALSE(s) << c.ranks << " " << c.mb;
    EXPECT_NE(s.message().find(c.expect), std::string::npos)
        << "got: " << s.message();
  }
}

} // namespace
