//===- Table5Test.cpp - The simulator reproduces Zero Bubble Table 5 ------===//

#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/PaperTables.h"
#include "pipeforge/Schedule/Simulator.h"

#include <gtest/gtest.h>

using namespace pipeforge::sched;

namespace {

TEST(Table5Test, BubbleRatesMatchThePaper) {
  const ScheduleKind kinds[] = {ScheduleKind::OneFOneB, ScheduleKind::ZBH1,
                                ScheduleKind::ZBH2};
  for (const paper::ZeroBubbleSetting &z : paper::kZeroBubbleSettings) {
    const double published[] = {z.r1f1b, z.rzbh1, z.rzbh2};
    for (int k = 0; k < 3; ++k) {
      GenOptions opts;
      opts.ranks = z.p;
      opts.microbatches = z.m;
      Expected<Schedule> s = generate(kinds[k], opts);
      ASSERT_TRUE(s) << s.message();
      CostModel cost;
      cost.tf = z.tf;
      cost.tb = z.tb;
      cost.tw = z.tw;
      cost.tcomm = z.tcomm;
      Expected<SimResult> r = simulate(*s, cost);
      ASSERT_TRUE(r) << r.message();
      EXPECT_NEAR(r->zbBubbleRate, published[k], 0.0005)
          << z.model << " m=" << z.m << " " << scheduleKindName(kinds[k]);
    }
  }
}

} // namespace
