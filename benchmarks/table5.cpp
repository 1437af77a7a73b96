//===- table5.cpp - Reproduce Table 5 of the Zero Bubble paper ------------===//
//
// For each Table 9 setting (p, m, T_F, T_B, T_W, T_comm), generates 1F1B,
// ZB-H1 and ZB-H2, simulates them with T_comm on every cross-stage edge and
// prints the Zero Bubble bubble rate next to the published one:
//   cost = max over ranks of (end of last compute - start of first compute)
//   rate = (cost - m (T_F + T_B + T_W)) / cost
// Exit status 1 if any rate differs from the paper by more than 0.0005.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/PaperTables.h"
#include "pipeforge/Schedule/Simulator.h"

#include <cmath>
#include <cstdio>

using namespace pipeforge::sched;

int main() {
  const ScheduleKind kinds[] = {ScheduleKind::OneFOneB, ScheduleKind::ZBH1,
                                ScheduleKind::ZBH2};
  std::printf("%-6s %3s %4s | %-23s | %-23s | %-23s\n", "model", "p", "m",
              "1F1B paper/ours/diff", "ZB-H1 paper/ours/diff",
              "ZB-H2 paper/ours/diff");
  double worst = 0;
  bool failed = false;
  for (const paper::ZeroBubbleSetting &z : paper::kZeroBubbleSettings) {
    std::printf("%-6s %3d %4d", z.model, z.p, z.m);
    const double published[] = {z.r1f1b, z.rzbh1, z.rzbh2};
    for (int k = 0; k < 3; ++k) {
      GenOptions opts;
      opts.ranks = z.p;
      opts.microbatches = z.m;
      Expected<Schedule> s = generate(kinds[k], opts);
      if (!s) {
        std::printf(" | error: %s\n", s.message().c_str());
        failed = true;
        continue;
      }
      CostModel cost;
      cost.tf = z.tf;
      cost.tb = z.tb;
      cost.tw = z.tw;
      cost.tcomm = z.tcomm;
      Expected<SimResult> r = simulate(*s, cost);
      if (!r) {
        std::printf(" | error: %s\n", r.message().c_str());
        failed = true;
        continue;
      }
      double diff = r->zbBubbleRate - published[k];
      worst = std::max(worst, std::fabs(diff));
      failed |= std::fabs(diff) > 0.0005;
      std::printf(" | %.4f %.4f %+.4f", published[k], r->zbBubbleRate, diff);
    }
    std::printf("\n");
  }
  std::printf("largest |diff|: %.5f (tolerance 0.0005)\n", worst);
  return failed ? 1 : 0;
}
