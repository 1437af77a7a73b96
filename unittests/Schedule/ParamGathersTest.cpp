//===- ParamGathersTest.cpp - ZeRO-3's gathers in a schedule --------------===//

#include "pipeforge/Schedule/ParamGathers.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
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

} // namespace
