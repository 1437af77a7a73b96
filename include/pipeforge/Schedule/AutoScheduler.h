//===- AutoScheduler.h - Automatic schedules under a memory limit -*- C++ -*-===//
//
// The Zero Bubble automatic scheduler (paper §3 and appendix G), improved:
//   1. a heuristic (list scheduling on the cost model: memory-limited
//      warm-up, 1F-1B, W filling gaps, W flushed at the end) run over a small
//      grid of its binary / integer choices, with the handcrafted ZB-H1/H2
//      and a port of the Zero Bubble repo's own greedy (the published
//      ZB-1p / ZB-2p) as further candidates, then a local search over the
//      per-rank orders; the best by simulated Zero Bubble cost wins;
//   2. an optional ILP refinement (COIN-OR CBC) warm-started from it;
//   3. a cheap proven lower bound on the Zero Bubble cost and the makespan.
// Placements: linear (p stages) or V (2p stages, auto ZB-V). Memory is in
// the units of `cost` (memB / memW per stage; see CostModel) and the limit
// is per rank. docs/auto-scheduler.md describes the method.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_AUTOSCHEDULER_H
#define PIPEFORGE_SCHEDULE_AUTOSCHEDULER_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Simulator.h"

#include <string>
#include <vector>

namespace pipeforge::sched {

struct AutoOptions {
  int32_t ranks = 0;        ///< p
  int32_t microbatches = 0; ///< m
  bool vShape = false;      ///< auto ZB-V: 2p stages, rank r holds r, 2p-1-r
  /// Times (tf/tb/tw, per stage when the vectors are set), tcomm, and the
  /// memory deltas (memB/memW, per stage when set). tbw/tfb are unused.
  CostModel cost;
  /// Per-rank activation limit in the units of cost.memB; < 0: unlimited.
  double memLimit = -1;
  /// Wall-clock budget of the heuristic's local search, seconds.
  double searchTimeLimit = 0.5;
  bool useIlp = true;
  /// CBC wall-clock limit (s) and relative gap at which it stops.
  double ilpTimeLimit = 10;
  double ilpGap = 1e-4;
  /// The ILP is only attempted up to this many passes (3 p m for linear).
  int32_t ilpMaxPasses = 400;
};

struct LowerBound {
  /// Proven: no valid schedule (any order, this memory limit) has a smaller
  /// Zero Bubble cost (max over ranks of last end - first start) ...
  double zbCost = 0;
  /// ... or a smaller makespan.
  double makespan = 0;
};

struct AutoResult {
  Schedule schedule; ///< compute actions only (F, B, W)
  SimResult sim;     ///< simulate(schedule, cost)
  double makespan = 0;
  double zbCost = 0; ///< max over ranks of (last end - first start)
  LowerBound bound;  ///< analytic, proven (see docs/auto-scheduler.md)
  /// Gap of zbCost to the best proven bound: (zbCost - bound) / zbCost.
  double gap = 0;
  double heuristicZbCost = 0;
  std::string method;    ///< "heuristic" or "ilp"
  bool ilpRan = false;
  bool ilpOptimal = false;  ///< CBC proved optimality (within its model)
  /// CBC's best bound on the Zero Bubble cost within the ILP model (whose
  /// reductions are documented); 0 when the ILP did not run.
  double ilpBound = 0;
  std::string note;         ///< why the ILP did not run / improve, etc.
};

/// The smallest per-rank memory limit for which some schedule exists: one
/// microbatch's activation on the rank that holds the most (for a V, a
/// rank's two chunks).
double minFeasibleMemLimit(const AutoOptions &opts);

/// The automatic schedule. Errors: bad sizes, or a memory limit below
/// minFeasibleMemLimit ("memory limit ... is impossible: ...").
Expected<AutoResult> autoSchedule(const AutoOptions &opts);

/// The analytic lower bound alone.
LowerBound autoLowerBound(const AutoOptions &opts);

/// M_W / M_B = 32h / (34h + 5as) (Zero Bubble paper, docs/background.md).
inline double memWRatio(double hidden, double heads, double seq) {
  return 32 * hidden / (34 * hidden + 5 * heads * seq);
}

namespace detail {
/// Per-rank orders of Work (F, B, W only) -> Schedule named "auto".
Schedule ordersToSchedule(const std::vector<std::vector<Work>> &orders,
                          const Placement &pl, int m);
/// Heuristic + local search only (no ILP).
Expected<AutoResult> autoHeuristic(const AutoOptions &opts);
/// ILP refinement of `start` (must be valid for opts). Returns the better
/// of `start` and the ILP's solution, with ilp fields set.
AutoResult autoIlp(const AutoOptions &opts, AutoResult start);
/// The Zero Bubble repo's own greedy (auto_schedule.py, manual_order; see
/// AutoZbGreedy.cpp), linear placement only, for one setting of its three
/// binary choices. Returns the per-rank orders (empty when it cannot fit the
/// memory limit or for a V) and, in `zbCost`, the greedy's own Zero Bubble
/// cost (max over stages of last W end - first F start).
std::vector<std::vector<Work>>
zbGreedyOrders(const AutoOptions &opts, bool allowBubbleBeforeFirstB,
               bool prioritizeB, bool noBubbleGreedy,
               double *zbCost = nullptr);
/// Peak memory of each rank's order under `cost`; true if within `limit`.
bool ordersFitMemory(const std::vector<std::vector<Work>> &orders,
                     const CostModel &cost, double limit);
} // namespace detail

} // namespace pipeforge::sched

#endif
