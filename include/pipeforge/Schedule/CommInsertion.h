//===- CommInsertion.h - Send/recv insertion --------------------*- C++ -*-===//
//
// Adds a Send on the producer's rank and a matching Recv on the consumer's
// rank for every cross-rank dependency (F(s,j) -> F(s+1,j) activations,
// B(s,j) -> B(s-1,j) gradients), none for same-rank hand-offs, and for
// DualPipe the GradReduce between ranks r and N-1-r at the end. The order is
// deadlock-free under rendezvous (blocking, matched) semantics: all ranks
// meet their messages in the order of one global total order.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_COMMINSERTION_H
#define PIPEFORGE_SCHEDULE_COMMINSERTION_H

#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Simulator.h"

namespace pipeforge::sched {

/// Inserts messages into a compute-only schedule. Fails if the schedule
/// already has messages or its compute order cannot be made to run. The
/// messages are placed by a replay on `cost`: give the costs the schedule
/// will run with and the messages do not stretch it (the default is unit
/// costs, BW = 2).
Status insertComm(Schedule &s, const CostModel &cost);
Status insertComm(Schedule &s);

/// Removes every Send / Recv / GradReduce (e.g. before re-inserting).
void stripComm(Schedule &s);

} // namespace pipeforge::sched

#endif
