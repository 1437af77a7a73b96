//===- Offload.h - Activation offload's plan for one rank's program -------===//
//
// Which microbatches' F-stashes leave the device between their F and their
// B, and when they leave and come back (docs/runtime.md, "Activation
// offload"). Stated once, here: the runtime executes this plan
// (runtime/lib/ExecutorOffload.cpp) and the simulator's memory accounting
// replays it (Replay.cpp), so measured and simulated peaks agree.
//
//   offloaded   a (copy, stage, mb) whose F and B (or BW) are on this rank
//               with at least `minGap` compute actions between them
//               (compute: Compute or Overlap actions)
//   leaves      after its F, its device memory is freed at the end of the
//               next compute action (the copy out runs under it)
//   returns     at the start of the compute action before its B (the copy
//               back runs under it)
//
// The plan can also stand in the schedule as actions (insertOffload, the
// pass --pp-insert-offload): OFFLOAD F right after the compute action of
// F, RELOAD F right before the compute action before its B. A program that
// holds them carries its own plan (offloadPlanOf): the stash leaves the
// device at the end of the first compute action after its OFFLOAD and
// comes back at the start of the first compute action after its RELOAD, so
// the actions insertOffload places give planOffload's plan exactly.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_SCHEDULE_OFFLOAD_H
#define PIPEFORGE_SCHEDULE_OFFLOAD_H

#include "pipeforge/Schedule/Action.h"

#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace pipeforge::sched {

/// (copy, stage, mb).
using StashKey = std::tuple<int, int, int>;

struct OffloadPlan {
  std::set<StashKey> keys;
  /// Action index -> the offloaded stashes whose device memory is freed at
  /// that action's end.
  std::map<size_t, std::vector<StashKey>> awayAfter;
  /// Action index -> the offloaded stashes that come back before it starts.
  std::map<size_t, std::vector<StashKey>> reloadBefore;
  bool empty() const { return keys.empty(); }
};

/// The plan for one rank's program; minGap <= 0: none.
OffloadPlan planOffload(const std::vector<Action> &program, int minGap);

/// Whether any rank's program holds an OFFLOAD or RELOAD.
bool hasOffloadActions(const std::vector<Action> &program);
bool hasOffloadActions(const Schedule &s);

/// The plan a program's OFFLOAD / RELOAD actions state (empty: none). Read
/// from the actions' places only; the verifier checks them.
OffloadPlan offloadPlanOf(const std::vector<Action> &program);

/// Writes planOffload(program, minGap) into every rank's program as
/// actions, every other action kept where it is: OFFLOAD F right after
/// the compute action of F, RELOAD F right before the compute action
/// before its B (after that action's receives). Runs on a schedule with or
/// without messages (after them: insertComm refuses a schedule that
/// offloads). A schedule that already offloads, or minGap < 1, is an
/// error. A plan with no stash leaves the schedule unchanged.
Status insertOffload(Schedule &s, int minGap);

/// The gaps of `--offload-activations auto` (time to hide the copy out and
/// the copy back behind compute) and `all`.
constexpr int kOffloadGapAuto = 2, kOffloadGapAll = 1;

} // namespace pipeforge::sched

#endif
