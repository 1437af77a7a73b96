//===- auto_table.cpp - Automatic schedules vs. the Zero Bubble paper -----===//
//
// For each Table 9 setting (p, m, T_F, T_B, T_W, T_comm), runs the automatic
// scheduler at M_limit = p M_B and 2p M_B (M_W / M_B = 32h / (34h + 5as)
// with the Table 3 h, a, s) and prints its Zero Bubble bubble rate next to
// the published ZB-1p (= the ZB-H1 column of Table 5) and ZB-2p, the port
// of the Zero Bubble repo's own greedy alone ("port", which reproduces the
// published columns), and the bubble rate of the proven lower bound. Exit
// status 1 if ours is worse than published anywhere, or not strictly better
// where published ZB-2p > 1% unless ours equals the proven lower bound (then
// the published schedule is optimal and nothing is strictly better), or if
// the port does not reproduce a published value.
//
// It runs the search through the same library call as `pipeforge-sched
// --schedule auto` (runScheduleJob, Job.h) with the tool's inputs:
// --hidden/--heads/--seq 1024 for M_W / M_B and --mem-limit 1p / 2p, and
// the tool's default work budgets, so the tool prints the same numbers
// (test/Schedule/auto-table9.test checks every row through the tool). The
// rates are the search's own, compute-only with T_comm on every cross-rank
// edge (the paper's model; the tool's --compute-only); "msgs" is the rate
// the tool prints by default, after inserting send/recv messages.
//
//   auto_table [--search-moves N] [--ilp] [--time-limit S]
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/CommInsertion.h"
#include "pipeforge/Schedule/Job.h"
#include "pipeforge/Schedule/PaperTables.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace pipeforge::sched;

namespace {
/// Paper Table 3: hidden size and heads per model; s = 1024.
void shapeOf(const std::string &model, double &h, double &a) {
  if (model == "1.5B")
    h = 2304, a = 24;
  else if (model == "6.2B")
    h = 4096, a = 32;
  else if (model == "14.6B")
    h = 5120, a = 40;
  else
    h = 6144, a = 48;
}
} // namespace

int main(int argc, char **argv) {
  ScheduleJob base;
  base.schedule = "auto";
  base.computeOnly = true;
  base.useIlp = false;
  base.timeLimit = 600;
  // The paper's ZB-1p / ZB-2p: the linear placement, times per stage.
  base.anyPlacement = false;
  base.costsPerRank = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--search-moves") && i + 1 < argc)
      base.searchMoves = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--time-limit") && i + 1 < argc)
      base.timeLimit = std::atof(argv[++i]);
    else if (!std::strcmp(argv[i], "--ilp"))
      base.useIlp = true;
  }
  std::printf("%-6s %3s %4s %6s | %-42s | %-42s\n", "model", "p", "m", "MW/MB",
              "ZB-1p: paper  port   ours   bound  msgs",
              "ZB-2p: paper  port   ours   bound  msgs");
  bool failed = false, provenOptimalTie = false, portMismatch = false,
       cut = false;
  const char *only = std::getenv("PF_AUTO_ONLY");
  for (const paper::ZeroBubbleSetting &z : paper::kZeroBubbleSettings) {
    if (only && std::to_string(z.p) + "/" + std::to_string(z.m) != only)
      continue;
    double h = 0, a = 0;
    shapeOf(z.model, h, a);
    std::printf("%-6s %3d %4d %6.3f", z.model, z.p, z.m,
                memWRatio(h, a, 1024));
    const double published[] = {z.rzbh1, z.rzb2p};
    for (int k = 0; k < 2; ++k) {
      // The tool's command line, as a job.
      ScheduleJob job = base;
      job.ranks = z.p;
      job.microbatches = z.m;
      job.tf = z.tf;
      job.tb = z.tb;
      job.tw = z.tw;
      job.tcomm = z.tcomm;
      job.hidden = h;
      job.heads = a;
      job.seq = 1024;
      job.memLimit = k == 0 ? "1p" : "2p";
      auto oo = autoOptionsForJob(job);
      if (!oo) {
        std::printf(" | error: %s", oo.message().c_str());
        failed = true;
        continue;
      }
      AutoOptions o = *oo;
      // The port of the Zero Bubble repo's greedy alone (best of its eight
      // choices, its own cost): it should reproduce the published column.
      double port = -1;
      for (int ch = 0; ch < 8; ++ch) {
        double zc = 0;
        if (!detail::zbGreedyOrders(o, ch & 1, ch & 2, ch & 4, &zc).empty() &&
            (port < 0 || zc < port))
          port = zc;
      }
      auto jr = runScheduleJob(job);
      if (!jr) {
        std::printf(" | error: %s", jr.message().c_str());
        failed = true;
        continue;
      }
      const AutoResult *r = &*jr->autoResult;
      cut |= r->timeLimitHit;
      // What the tool prints by default: the same schedule with messages.
      double msgs = -1;
      {
        Schedule withMsgs = r->schedule;
        if (insertComm(withMsgs, jr->cost))
          if (auto sim = simulate(withMsgs, jr->cost))
            msgs = sim->zbBubbleRate;
      }
      double busy = z.m * (z.tf + z.tb + z.tw);
      double ours = jr->sim.zbBubbleRate; // = the tool with --compute-only
      double lb = (r->bound.zbCost - busy) / r->bound.zbCost;
      // The paper prints 4 decimals: compare at that precision. Where ours
      // reaches the proven lower bound it is optimal; if it then equals the
      // published value, the published schedule is optimal too and nothing
      // can be strictly better (marked "=*", counted separately).
      double r4 = std::round(ours * 1e4) / 1e4;
      bool optimal = r->zbCost <= r->bound.zbCost * (1 + 1e-9);
      bool worse = r4 > published[k] + 1e-9;
      bool notBetter =
          k == 1 && published[k] > 0.01 && r4 >= published[k] - 1e-9;
      bool bad = worse || (notBetter && !optimal);
      provenOptimalTie |= notBetter && optimal && !worse;
      double portRate = port > 0 ? (port - busy) / port : -1;
      bool portOff = std::fabs(std::round(portRate * 1e4) / 1e4 -
                               published[k]) > 1e-9;
      portMismatch |= portOff;
      failed |= bad;
      std::printf(" | %12.4f %.4f%s %.4f %.4f%s %.4f", published[k], portRate,
                  portOff ? "?" : "", ours, lb,
                  bad ? " !!" : (notBetter && optimal ? " =*" : "   "), msgs);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (cut)
    std::printf("note: the time limit cut the search short somewhere; the "
                "numbers depend on this machine\n");
  if (portMismatch)
    std::printf("note: the port of the Zero Bubble greedy (\"port\") differs "
                "from the published value where marked ?\n");
  if (provenOptimalTie)
    std::printf("=*: published ZB-2p > 1%% and ours equals it, but ours "
                "equals the proven lower bound: no schedule is strictly "
                "better\n");
  std::printf("%s\n",
              failed ? "FAIL: worse than published somewhere, or not better "
                       "where it could be"
                     : "ours <= published everywhere; < where ZB-2p > 1%, "
                       "except where the published value is proven optimal");
  return failed || portMismatch ? 1 : 0;
}
