//===- ParamGathersTest.cpp - ZeRO-3's gathers in a schedule --------------===//

#include "pipeforge/Schedule/ParamGathers.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Schedule/Verify.h"

#include "HandSchedules.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

using namespace pipeforge::sched;
using namespace pipeforge::sched::testing;

namespace {

std::vector<std::string> texts(const std::vector<Action> &prog) {
  std::vector<std::string> out;
  for (const Action &a : prog)
    out.push_back(toString(a));
  return out;
}

using Texts = std::vector<std::string>;

TEST(ParamGathersTest, PrefetchZeroOneStage) {
  Schedule s = hand1F1B(2, 2);
  ASSERT_FALSE(hasParamGathers(s));
  ASSERT_TRUE(insertParamGathers(s, 0).isOk());
  EXPECT_TRUE(hasParamGathers(s));
  EXPECT_EQ(texts(s.programs[0]),
            (Texts{"UNSHARD 0", "F0.0", "F0.1", "BW0.0", "BW0.1",
                   "RESHARD 0"}));
  EXPECT_EQ(texts(s.programs[1]),
            (Texts{"UNSHARD 1", "F1.0", "BW1.0", "F1.1", "BW1.1",
                   "RESHARD 1"}));
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
}

// Two stages per rank, an overlapped pair: stage 3's gather one compute
// action ahead of F3.0; each release right after the stage's last use.
TEST(ParamGathersTest, PrefetchOneTwoStages) {
  Schedule s = handVOverlap();
  ASSERT_TRUE(insertParamGathers(s, 1).isOk());
  EXPECT_EQ(texts(s.programs[0]),
            (Texts{"UNSHARD 0", "F0.0", "UNSHARD 3", "F0.1", "F3.0",
                   "F3.1+BW3.0", "BW3.1", "RESHARD 3", "BW0.0", "BW0.1",
                   "RESHARD 0"}));
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
}

// A prefetch deeper than the program: every gather at the start, in the
// order of first use.
TEST(ParamGathersTest, PrefetchLarge) {
  Schedule s = handVOverlap();
  ASSERT_TRUE(insertParamGathers(s, kMaxParamPrefetch).isOk());
  Texts r0 = texts(s.programs[0]);
  ASSERT_GE(r0.size(), 3u);
  EXPECT_EQ(r0[0], "UNSHARD 0");
  EXPECT_EQ(r0[1], "UNSHARD 3");
  EXPECT_EQ(r0[2], "F0.0");
  Texts r1 = texts(s.programs[1]);
  EXPECT_EQ(r1[0], "UNSHARD 1");
  EXPECT_EQ(r1[1], "UNSHARD 2");
  EXPECT_EQ(r1.back(), "RESHARD 1");
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
}

TEST(ParamGathersTest, Errors) {
  Schedule s = hand1F1B(2, 2);
  Status st = insertParamGathers(s, -1);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.message(), "parameter prefetch -1 is outside [0, 64]");
  st = insertParamGathers(s, kMaxParamPrefetch + 1);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.message(), "parameter prefetch 65 is outside [0, 64]");
  EXPECT_FALSE(hasParamGathers(s));
  ASSERT_TRUE(insertParamGathers(s, 1).isOk());
  st = insertParamGathers(s, 1);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("already gathers"), std::string::npos);
}

// DualPipe's overlapped pairs name two stages (one of each copy): both
// are gathered before the pair and released after their last use.
TEST(ParamGathersTest, DualPipePairsNameTwoStages) {
  GenOptions o;
  o.ranks = 4;
  o.microbatches = 16;
  Expected<Schedule> g = generate(ScheduleKind::DualPipe, o);
  ASSERT_TRUE(g.isOk()) << g.message();
  Schedule s = std::move(*g);
  ASSERT_TRUE(insertComm(s).isOk());
  ASSERT_TRUE(insertParamGathers(s, 0).isOk());
  int pairsOfTwo = 0;
  for (int32_t r = 0; r < s.numRanks(); ++r) {
    std::set<std::pair<int, int>> gathered, released;
    for (const Action &a : s.programs[r]) {
      if (a.kind == ActionKind::Unshard)
        gathered.insert({a.work.copy, a.work.stage});
      else if (a.kind == ActionKind::Reshard)
        released.insert({a.work.copy, a.work.stage});
      else if (a.kind == ActionKind::Overlap) {
        std::pair<int, int> f{a.work.copy, a.work.stage},
            b{a.work2.copy, a.work2.stage};
        pairsOfTwo += f != b;
        EXPECT_TRUE(gathered.count(f) && gathered.count(b)) << toString(a);
        EXPECT_FALSE(released.count(f) || released.count(b)) << toString(a);
      }
    }
    EXPECT_EQ(gathered.size(), 2u) << "rank " << r;
    EXPECT_EQ(released, gathered) << "rank " << r;
  }
  EXPECT_GT(pairsOfTwo, 0);
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
}

// Every generated schedule with its messages stays valid under every
// prefetch depth.
TEST(ParamGathersTest, GeneratedSchedulesVerify) {
  for (ScheduleKind k :
       {ScheduleKind::OneFOneB, ScheduleKind::Interleaved, ScheduleKind::ZBH1,
        ScheduleKind::ZBV, ScheduleKind::DualPipe, ScheduleKind::DualPipeV,
        ScheduleKind::Chimera}) {
    for (int prefetch : {0, 1, 2, kMaxParamPrefetch}) {
      GenOptions o;
      o.ranks = 4;
      o.microbatches = 8;
      Expected<Schedule> g = generate(k, o);
      ASSERT_TRUE(g.isOk()) << g.message();
      Schedule s = std::move(*g);
      ASSERT_TRUE(insertComm(s).isOk());
      ASSERT_TRUE(insertParamGathers(s, prefetch).isOk());
      Status st = verify(s);
      EXPECT_TRUE(st.isOk()) << s.name << " prefetch " << prefetch << ": "
                             << st.message();
    }
  }
}

// --- the simulator ----------------------------------------------------------

// Without gather costs a schedule with gathers replays exactly as without.
TEST(ParamGathersTest, FreeGathersChangeNothing) {
  for (Schedule s : {hand1F1B(3, 6), handVOverlap(), handZB(2, 4, 1)}) {
    Schedule g = s;
    ASSERT_TRUE(insertParamGathers(g, 1).isOk());
    Expected<SimResult> a = simulate(s, CostModel()),
                        b = simulate(g, CostModel());
    ASSERT_TRUE(a.isOk() && b.isOk());
    EXPECT_EQ(a->makespan, b->makespan);
    EXPECT_EQ(a->bubbleRate, b->bubbleRate);
    for (size_t r = 0; r < a->ranks.size(); ++r) {
      EXPECT_EQ(a->ranks[r].busy, b->ranks[r].busy);
      EXPECT_EQ(a->ranks[r].peakMemory, b->ranks[r].peakMemory);
      EXPECT_EQ(b->ranks[r].exposedGather, 0);
    }
    // The compute intervals are the same; the gathers add instants.
    SimOptions o;
    o.intervals = SimIntervals::Compute;
    Expected<SimResult> ca = simulate(s, CostModel(), o),
                        cb = simulate(g, CostModel(), o);
    ASSERT_EQ(ca->intervals.size(), cb->intervals.size());
    for (size_t k = 0; k < ca->intervals.size(); ++k) {
      EXPECT_EQ(ca->intervals[k].start, cb->intervals[k].start);
      EXPECT_EQ(ca->intervals[k].end, cb->intervals[k].end);
    }
  }
}

// An UNSHARD takes the stage's gathered bytes over the gather bandwidth on
// the rank's gather channel; the stage's next compute waits for it.
TEST(ParamGathersTest, GatherTimeDelaysTheFirstCompute) {
  Schedule s = hand1F1B(2, 2);
  ASSERT_TRUE(insertParamGathers(s, 0).isOk());
  CostModel c;
  Expected<SimResult> base = simulate(s, c);
  c.paramBytes = 4;
  c.gatherBytesPerTime = 2; // 2 time units per UNSHARD
  Expected<SimResult> r = simulate(s, c);
  ASSERT_TRUE(base.isOk() && r.isOk()) << r.message();
  // Rank 0 waits 2 for stage 0; rank 1's gather ends at 2, before F1.0's
  // input arrives at 3: hidden.
  EXPECT_EQ(r->ranks[0].exposedGather, 2);
  EXPECT_EQ(r->ranks[1].exposedGather, 0);
  EXPECT_EQ(r->ranks[0].gatherBusy, 2);
  EXPECT_EQ(r->makespan, base->makespan + 2);
  // Per-stage bytes override the uniform value: stage 1's gather (1 unit)
  // ends as F0.0's activation arrives.
  c.paramBytesStage = {0, 2};
  Expected<SimResult> st = simulate(s, c);
  EXPECT_EQ(st->ranks[0].exposedGather, 0);
  EXPECT_EQ(st->makespan, base->makespan);
}

// Prefetch hides a later stage's gather behind compute; at prefetch 0 it
// is exposed.
TEST(ParamGathersTest, PrefetchHidesTheGather) {
  CostModel c;
  c.paramBytes = 1;
  c.gatherBytesPerTime = 1;
  c.tcomm = 0;
  double exposed[2];
  for (int prefetch : {0, 1}) {
    Schedule s = handVOverlap();
    ASSERT_TRUE(insertParamGathers(s, prefetch).isOk());
    Expected<SimResult> r = simulate(s, c);
    ASSERT_TRUE(r.isOk()) << r.message();
    exposed[prefetch] = r->ranks[0].exposedGather + r->ranks[1].exposedGather;
  }
  // Prefetch 0: every first gather is exposed (1 each on the first stage
  // of each rank, and stage 3's on rank 0 right before F3.0).
  EXPECT_GT(exposed[0], exposed[1]);
}

// The gathered parameters count in memory from UNSHARD to RESHARD.
TEST(ParamGathersTest, GatheredParametersCountInMemory) {
  Schedule s = handGPipe(2, 2);
  Schedule g = s;
  ASSERT_TRUE(insertParamGathers(g, 0).isOk());
  CostModel c;
  c.paramBytes = 8;
  c.memPerParamByte = 0.125; // 1 memory unit per stage
  Expected<SimResult> a = simulate(s, c), b = simulate(g, c);
  ASSERT_TRUE(a.isOk() && b.isOk());
  for (size_t r = 0; r < 2; ++r)
    EXPECT_EQ(b->ranks[r].peakMemory, a->ranks[r].peakMemory + 1);
  // Two stages gathered at once on a V rank (prefetch past the program).
  Schedule v = handVOverlap();
  Expected<SimResult> va = simulate(v, c);
  ASSERT_TRUE(insertParamGathers(v, kMaxParamPrefetch).isOk());
  Expected<SimResult> vb = simulate(v, c);
  EXPECT_EQ(vb->ranks[0].peakMemory, va->ranks[0].peakMemory + 2);
  // The verifier's memory limit counts them too.
  VerifyOptions vo;
  vo.cost = c;
  vo.memLimit = va->ranks[0].peakMemory + 1.5;
  Status st = verify(v, vo);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("exceeds the limit"), std::string::npos);
}

TEST(ParamGathersTest, CostsChecked) {
  CostModel c;
  c.gatherBytesPerTime = -1;
  Status st = checkCosts(c, 2, 10);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("gather bandwidth"), std::string::npos);
  c = CostModel();
  c.paramBytesStage = {1, -2};
  st = checkCosts(c, 2, 10);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("parameter bytes of stage 1"), std::string::npos);
}

} // namespace

namespace {
// A compute-only schedule with gathers (an imported CSV) gets its messages
// around them: each UNSHARD stays before the compute it preceded, each
// RESHARD after the one it followed.
TEST(ParamGathersTest, MessagesGoInAroundTheGathers) {
  Schedule s = hand1F1B(2, 2);
  ASSERT_TRUE(insertParamGathers(s, 0).isOk());
  ASSERT_TRUE(insertComm(s).isOk());
  EXPECT_EQ(texts(s.programs[1]),
            (Texts{"RECV act F0.0 <-r0", "UNSHARD 1", "F1.0",
                   "RECV act F0.1 <-r0", "BW1.0", "SEND grad BW1.0 ->r0",
                   "F1.1", "BW1.1", "RESHARD 1", "SEND grad BW1.1 ->r0"}));
  EXPECT_TRUE(verify(s).isOk()) << verify(s).message();
}
} // namespace

namespace {
// A gather that takes time is a comm interval on the rank's gather channel
// (traces and SVGs draw it), after the gathers posted before it.
TEST(ParamGathersTest, GatherIntervals) {
  Schedule s = handVOverlap();
  ASSERT_TRUE(insertParamGathers(s, kMaxParamPrefetch).isOk());
  CostModel c;
  c.paramBytes = 3;
  c.gatherBytesPerTime = 2;
  Expected<SimResult> r = simulate(s, c);
  ASSERT_TRUE(r.isOk()) << r.message();
  std::vector<CommInterval> g;
  for (const CommInterval &ci : r->commIntervals)
    if (ci.kind == CommInterval::Gather && ci.rank == 0)
      g.push_back(ci);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(g[0].start, 0);
  EXPECT_EQ(g[0].end, 1.5);
  EXPECT_EQ(g[1].start, 1.5); // behind the first on the channel
  EXPECT_EQ(g[1].end, 3);
  EXPECT_EQ(toString(s.programs[0][g[1].actionIndex]), "UNSHARD 3");
  EXPECT_EQ(r->ranks[0].gatherBusy, 3);
  EXPECT_EQ(r->ranks[0].exposedGather, 1.5); // F0.0 waits for stage 0
  EXPECT_NE(exportTrace(s, *r).find("\"name\":\"gather UNSHARD 3\""),
            std::string::npos);
  EXPECT_NE(exportSvg(s, *r).find("<title>UNSHARD 3 [1.50, 3.00]</title>"),
            std::string::npos);
  // Free gathers leave no interval.
  Expected<SimResult> free = simulate(s, CostModel());
  EXPECT_TRUE(free->commIntervals.empty());
}
} // namespace
