//===- Simulator.h - Event-driven replay on a cost model --------*- C++ -*-===//
#ifndef PIPEFORGE_SCHEDULE_SIMULATOR_H
#define PIPEFORGE_SCHEDULE_SIMULATOR_H

#include "pipeforge/Schedule/Action.h"

#include <vector>

namespace pipeforge::sched {

/// Times and memory deltas. Per-stage vectors, when non-empty, override the
/// uniform values (index = stage; the same for both DualPipe copies).
struct CostModel {
  double tf = 1, tb = 1, tw = 1;
  /// Time of a full backward BW; < 0 means tb + tw.
  double tbw = -1;
  /// Time of an overlapped F&B pair; < 0 means the sum of its members.
  double tfb = -1;
  /// Time on every cross-rank F or B edge (added between producer end and
  /// consumer start).
  double tcomm = 0;
  std::vector<double> tfStage, tbStage, twStage;

  /// Activation memory: F allocates memB, B frees memB - memW, W frees memW,
  /// BW frees memB. Units are free (default: M_B = 1 per stage).
  double memB = 1, memW = 0.5;
  std::vector<double> memBStage, memWStage;

  double timeOf(WorkKind k, int stage) const;
  double memDelta(WorkKind k, int stage) const;
};

struct RankStats {
  double busy = 0;          ///< compute time
  double firstStart = 0;    ///< start of the first compute
  double lastEnd = 0;       ///< end of the last compute
  double peakMemory = 0;    ///< peak activation memory (CostModel units)
  double exposedComm = 0;   ///< time blocked in Recv waiting for data
};

/// One executed compute (or comm) interval, for traces.
struct Interval {
  int32_t rank;
  size_t actionIndex; ///< into programs[rank]
  double start, end;
};

struct SimResult {
  double makespan = 0;
  /// 1 - sum(busy) / (ranks * makespan)
  double bubbleRate = 0;
  /// The Zero Bubble paper's: cost = max over ranks of (lastEnd - firstStart);
  /// (cost - max busy) / cost.
  double zbBubbleRate = 0;
  std::vector<RankStats> ranks;
  std::vector<Interval> intervals; ///< every action, in start order per rank
};

/// Replays the schedule. Works on compute-only schedules (dependencies are
/// inferred, tcomm is added on cross-rank edges) and on schedules with
/// messages (a Recv completes at the matching Send's time + tcomm). Fails
/// with the rank and step if the programs cannot finish (deadlock or a
/// missing producer).
Expected<SimResult> simulate(const Schedule &s, const CostModel &cost);

} // namespace pipeforge::sched

#endif
