//===- Generators.h - Handcrafted pipeline schedules ------------*- C++ -*-===//
//
// GPipe, 1F1B, interleaved 1F1B, ZB-H1, ZB-H2, ZB-V, DualPipe, DualPipeV.
// The result holds compute actions only (Compute and Overlap); run
// insertComm() to add the messages. Invalid requests return an error that
// says which rule was broken; nothing asserts on user input.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_GENERATORS_H
#define PIPEFORGE_SCHEDULE_GENERATORS_H

#include "pipeforge/Schedule/Action.h"

namespace pipeforge::sched {

struct GenOptions {
  int32_t ranks = 0;
  /// Microbatches. For DualPipe this is the total C (C/2 per copy); for
  /// every other kind it is m, the count per (single) copy.
  int32_t microbatches = 0;
  /// Interleaved 1F1B: model chunks per rank (v >= 2).
  int32_t chunksPerRank = 2;
};

/// The smallest microbatch count `kind` accepts for `ranks` ranks.
int32_t minMicrobatches(ScheduleKind kind, int32_t ranks,
                        int32_t chunksPerRank = 2);

/// Generate the compute-only schedule. `Auto` is not handled here (see the
/// automatic scheduler) and returns an error.
Expected<Schedule> generate(ScheduleKind kind, const GenOptions &opts);

} // namespace pipeforge::sched

#endif
