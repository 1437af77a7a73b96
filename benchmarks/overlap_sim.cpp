//===- overlap_sim.cpp - Simulated exposed communication, fused vs not ----===//
//
// The simulator's prediction of exposed all-to-all (expert parallelism) and
// P2P time for DualPipe and DualPipeV with overlapped F&B pairs fused
// (components interleaved in DeepSeek's per-layer order, communication on
// its own per-rank resource) versus not fused (pairs run as F then B, every
// all-to-all exposed), 1F1B for reference. docs/schedule-library.md,
// "Communication model".
//
//   overlap_sim [ranks] [microbatches] [layers-per-rank]
//
// Per MoE layer T_F = T_B = T_W = 1; a rank holds `layers` MoE layers (a
// DualPipe or 1F1B stage all of them, a DualPipeV stage half), so every
// schedule does the same work per rank. tA2A is one dispatch or combine of
// one layer, given as a multiple of T_F; tcomm (P2P) is 0.5.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Simulator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace pipeforge::sched;

namespace {

struct Mode {
  const char *name;
  bool overlapComm, fusePairs;
};
const Mode kModes[] = {{"blocking", false, false},
                       {"no fusion", true, false},
                       {"fusion", true, true}};

void stats(const std::vector<RankStats> &rs, double RankStats::*f,
           double &mean, double &mx) {
  mean = mx = 0;
  for (const RankStats &s : rs) {
    mean += s.*f;
    mx = std::max(mx, s.*f);
  }
  mean /= rs.empty() ? 1 : rs.size();
}

std::string perRank(const std::vector<RankStats> &rs, double RankStats::*f) {
  std::string o;
  char buf[32];
  for (const RankStats &s : rs) {
    std::snprintf(buf, sizeof buf, "%s%.1f", o.empty() ? "" : " ", s.*f);
    o += buf;
  }
  return o;
}

} // namespace

int main(int argc, char **argv) {
  int p = argc > 1 ? std::atoi(argv[1]) : 8;
  int m = argc > 2 ? std::atoi(argv[2]) : 20;
  int layers = argc > 3 ? std::atoi(argv[3]) : 4;
  if (p < 2 || m < 1 || layers < 2 || layers % 2) {
    std::fprintf(stderr, "usage: overlap_sim [ranks>=2] [microbatches] "
                         "[even layers per rank]\n");
    return 2;
  }
  std::printf("%d ranks, %d microbatches, %d MoE layers per rank; per layer "
              "T_F = T_B = T_W = 1, tcomm = 0.5\n\n",
              p, m, layers);
  std::printf("| schedule | tA2A/T_F | mode | makespan | bubble | exposed A2A "
              "mean / max per rank | exposed P2P mean / max per rank |\n"
              "|---|---|---|---|---|---|---|\n");
  std::string detail;
  for (double ratio : {0.5, 1.0})
    for (ScheduleKind k : {ScheduleKind::DualPipe, ScheduleKind::DualPipeV,
                           ScheduleKind::OneFOneB}) {
      int stageLayers = k == ScheduleKind::DualPipeV ? layers / 2 : layers;
      CostModel base;
      base.tf = base.tb = base.tw = stageLayers;
      base.tcomm = 0.5;
      base.tA2A = ratio;
      base.moeLayersPerStage = stageLayers;
      GenOptions g;
      g.ranks = p;
      g.microbatches = m;
      Expected<Schedule> gs = generate(k, g);
      if (!gs) {
        std::fprintf(stderr, "%s: %s\n", scheduleKindName(k),
                     gs.message().c_str());
        return 1;
      }
      Schedule s = gs.take();
      if (Status st = insertComm(s, base); !st) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
      for (const Mode &md : kModes) {
        if (k == ScheduleKind::OneFOneB && md.fusePairs)
          continue; // no pairs to fuse
        CostModel c = base;
        c.overlapComm = md.overlapComm;
        c.fusePairs = md.fusePairs;
        Expected<SimResult> r = simulate(s, c);
        if (!r) {
          std::fprintf(stderr, "%s\n", r.message().c_str());
          return 1;
        }
        double am, ax, pm, px;
        stats(r->ranks, &RankStats::exposedA2A, am, ax);
        stats(r->ranks, &RankStats::exposedP2P, pm, px);
        std::printf("| %s | %.1f | %s | %.1f | %.1f%% | %.1f / %.1f | "
                    "%.1f / %.1f |\n",
                    scheduleKindName(k), ratio, md.name, r->makespan,
                    100 * r->bubbleRate, am, ax, pm, px);
        if (k != ScheduleKind::OneFOneB && md.overlapComm) {
          char head[96];
          std::snprintf(head, sizeof head, "%s tA2A=%.1f %s", 
                        scheduleKindName(k), ratio, md.name);
          detail += std::string(head) + "\n  a2a: " +
                    perRank(r->ranks, &RankStats::exposedA2A) +
                    "\n  p2p: " + perRank(r->ranks, &RankStats::exposedP2P) +
                    "\n";
        }
      }
    }
  std::printf("\nExposed time per rank (rank 0 .. %d):\n%s", p - 1,
              detail.c_str());
  return 0;
}
