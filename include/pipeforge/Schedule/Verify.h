//===- Verify.h - Schedule verifier -----------------------------*- C++ -*-===//
//
// Checks: each F, B, W exactly once per (copy, stage, mb) -- or BW in place of
// B+W --, every dependency respected, F/B/W of a stage in a valid order,
// sends and receives matched per channel in FIFO order, no deadlock under
// rendezvous semantics (proved by executing the programs), the optional
// activation-memory limit. The error names the rank and the step and prints
// that rank's program around it with a marker.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_VERIFY_H
#define PIPEFORGE_SCHEDULE_VERIFY_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Simulator.h"

#include <functional>
#include <optional>

namespace pipeforge::sched {

struct VerifyOptions {
  /// Per-rank peak activation limit, in the units of `cost` (default M_B).
  std::optional<double> memLimit;
  CostModel cost;
  /// Run once the static checks have passed (every check but the
  /// rendezvous replay and the memory limit), which is all a simulation
  /// with SimOptions::verified needs. On a big schedule with messages (64k
  /// actions or more on two ranks or more) it runs beside the replay (on
  /// another core, where there is one), and then also when the replay
  /// fails: its result
  /// stands only when verify() succeeds. Otherwise it runs after the
  /// replay, and only if the replay succeeds. It must not change the
  /// schedule, and may only read it while the replay runs. An exception it
  /// throws reaches verify()'s caller. A job uses this to simulate a
  /// schedule of millions of actions while its deadlock freedom is proved.
  std::function<void()> alongsideReplay;
};

Status verify(const Schedule &s, const VerifyOptions &opts = {});

} // namespace pipeforge::sched

#endif
