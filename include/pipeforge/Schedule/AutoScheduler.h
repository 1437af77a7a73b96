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

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace pipeforge::sched {

/// Default work budgets of the automatic scheduler (docs/auto-scheduler.md,
/// "Work budgets and the time limit"). They, not the clock, decide how far
/// the search goes, so the schedule is a function of the inputs alone.
inline constexpr int64_t kDefaultSearchMoves = 20000;
inline constexpr int64_t kDefaultIlpNodes = 20;

struct AutoOptions {
  int32_t ranks = 0;        ///< p
  int32_t microbatches = 0; ///< m
  bool vShape = false;      ///< auto ZB-V: 2p stages, rank r holds r, 2p-1-r
  /// Times (tf/tb/tw, per stage when the vectors are set), tcomm, and the
  /// memory deltas (memB/memW, per stage when set). tbw/tfb are unused.
  CostModel cost;
  /// Per-rank activation limit in the units of cost.memB; < 0: unlimited.
  double memLimit = -1;
  /// Work budget of the heuristic's local search: candidate moves tried
  /// (one pass moved on its rank, each checked against the memory limit
  /// and, when it fits, evaluated by an ASAP replay). 0: no local search.
  /// Deterministic: the search stops after this many moves or at a local
  /// optimum, whichever comes first.
  int64_t searchMoves = kDefaultSearchMoves;
  /// Wall-clock ceiling of the whole call in seconds (heuristic grid, local
  /// search, ILP set-up and CBC); < 0: none. Only a ceiling: when it stops
  /// a part of the search before its work budget, the result says so
  /// (AutoResult::timeLimitHit, cutShort) and then depends on the machine.
  double timeLimit = -1;
  /// Older per-part ceilings (seconds, < 0: none), kept for callers that
  /// set them: the local search alone (0 skips it, like searchMoves = 0)
  /// and CBC alone. Both are ceilings like timeLimit.
  double searchTimeLimit = -1;
  bool useIlp = true;
  double ilpTimeLimit = -1;
  /// CBC's work budget: branch-and-bound nodes (deterministic), and the
  /// relative gap at which it stops.
  int64_t ilpMaxNodes = kDefaultIlpNodes;
  double ilpGap = 1e-4;
  /// The ILP is only attempted up to this many passes (3 p m for linear;
  /// CBC's root alone takes seconds beyond about 100).
  int32_t ilpMaxPasses = 100;
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
  /// (ILP incumbent - ilpBound) / incumbent, within the ILP's model; 0 when
  /// proven optimal or when the ILP did not run.
  double ilpGap = 0;
  int64_t ilpNodes = 0; ///< branch-and-bound nodes CBC explored
  /// How CBC stopped: "optimal", "gap" (within ilpGap), "node limit",
  /// "time limit", "infeasible"/"no solution"; empty when it did not run.
  std::string ilpStatus;
  int64_t searchMovesUsed = 0; ///< local-search moves tried
  /// The local search stopped at a local optimum (not at its budget).
  bool searchConverged = false;
  /// The wall-clock ceiling (timeLimit, or an older per-part one) stopped
  /// some part before its work budget: the result may differ on a faster
  /// or idler machine. cutShort names the parts ("heuristic grid", "local
  /// search", "ILP").
  bool timeLimitHit = false;
  std::string cutShort;
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
/// A wall-clock ceiling (none by default).
struct Deadline {
  std::chrono::steady_clock::time_point at =
      std::chrono::steady_clock::time_point::max();
  static Deadline in(double seconds) {
    Deadline d;
    if (seconds >= 0)
      d.at = std::chrono::steady_clock::now() +
             std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                 std::chrono::duration<double>(std::min(seconds, 1e9)));
    return d;
  }
  Deadline earliest(const Deadline &o) const { return o.at < at ? o : *this; }
  bool set() const { return at != std::chrono::steady_clock::time_point::max(); }
  bool passed() const {
    return set() && std::chrono::steady_clock::now() >= at;
  }
  /// Seconds left (>= 0); a large number when unset.
  double left() const {
    if (!set())
      return 1e9;
    return std::max(0.0, std::chrono::duration<double>(
                             at - std::chrono::steady_clock::now())
                             .count());
  }
};
/// Notes in `r` that the ceiling stopped `part`.
void noteCutShort(AutoResult &r, const std::string &part);
/// Per-rank orders of Work (F, B, W only) -> Schedule named "auto".
Schedule ordersToSchedule(const std::vector<std::vector<Work>> &orders,
                          const Placement &pl, int m);
/// Heuristic + local search only (no ILP), under the ceiling `deadline`.
Expected<AutoResult> autoHeuristic(const AutoOptions &opts,
                                   const Deadline &deadline = {});
/// ILP refinement of `start` (must be valid for opts). Returns the better
/// of `start` and the ILP's solution, with ilp fields set.
AutoResult autoIlp(const AutoOptions &opts, AutoResult start,
                   const Deadline &deadline = {});
/// The Zero Bubble cost (max over ranks of last end - first start) of
/// compute-only per-rank orders by an ASAP replay on `cost` (the
/// simulator's timing: a pass starts when its rank is free and its inputs
/// are there, plus tcomm from another rank); < 0 if the orders cannot run.
/// `sumSpans` / `makespan` receive the sum of the ranks' spans and the last
/// end. Equal to simulate()'s (unit-tested); much cheaper.
double replayZbCost(const std::vector<std::vector<Work>> &orders,
                    const Placement &pl, int m, const CostModel &cost,
                    double *sumSpans = nullptr, double *makespan = nullptr);
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
