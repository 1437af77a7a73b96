//===- GenUtil.h - Internals shared by the schedule generators --*- C++ -*-===//
//
// Private to lib/Schedule: small helpers for building per-rank action lists
// and the per-family generator entry points that Generators.cpp dispatches
// to. Options are validated by the dispatcher before these run.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_LIB_SCHEDULE_GENUTIL_H
#define PIPEFORGE_LIB_SCHEDULE_GENUTIL_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Generators.h"

#include <string>
#include <vector>

namespace pipeforge::sched::detail {

inline Work makeWork(WorkKind kind, int stage, int mb, int copy = 0) {
  Work w;
  w.kind = kind;
  w.stage = stage;
  w.mb = mb;
  w.copy = static_cast<int8_t>(copy);
  return w;
}

/// Reserves a rank's program for `compute` actions and the messages
/// insertComm adds to them later (at most a receive and a send per F and
/// per B, and a GradReduce), so that it merges them in place, without a
/// second copy of the program: the room is address space only until the
/// messages are written (a million microbatches: 288 MB of compute actions
/// that are neither copied nor faulted in twice).
inline void reserveProgram(std::vector<Action> &prog, size_t compute) {
  prog.reserve(3 * compute + 1);
}

/// A schedule with `placement`, `m` microbatches per copy and one empty
/// program per rank.
inline Schedule makeSchedule(std::string name, Placement placement, int m) {
  Schedule s;
  s.name = std::move(name);
  s.numMicrobatches = m;
  s.programs.resize(placement.numRanks);
  s.placement = std::move(placement);
  return s;
}

// GenPipeline.cpp
Schedule genGPipe(const GenOptions &opts);
Schedule genOneFOneB(const GenOptions &opts);
Schedule genInterleaved(const GenOptions &opts);

// GenZeroBubble.cpp
Schedule genZBH1(const GenOptions &opts);
Schedule genZBH2(const GenOptions &opts);
Schedule genZBV(const GenOptions &opts);

// GenDualPipe.cpp
Schedule genDualPipe(const GenOptions &opts);
Schedule genDualPipeV(const GenOptions &opts);

// GenChimera.cpp
Schedule genChimera(const GenOptions &opts);

// GenControllable.cpp
Schedule genVHalf(const GenOptions &opts);
Schedule genVMin(const GenOptions &opts);

} // namespace pipeforge::sched::detail

#endif
