//===- ParamGathers.h - ZeRO-3's parameter gathers in a schedule -*- C++ -*-===//
//
// Plain C++. Under ZeRO-3 a rank holds only the parameters it owns (their
// optimizer state and their master values); the others of a stage it
// computes are gathered from their owners before the stage's first F/B/W
// work of the step and released after its last. Both are actions of the
// schedule (ActionKind::Unshard / Reshard), so that they are printed,
// verified (Verify.h), simulated and lowered into the program like every
// other action; the runtime executes them (docs/optimizer.md, "ZeRO-3").
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_SCHEDULE_PARAMGATHERS_H
#define PIPEFORGE_SCHEDULE_PARAMGATHERS_H

#include "pipeforge/Schedule/Action.h"

namespace pipeforge::sched {

/// The most compute actions an UNSHARD may run ahead of its stage's first
/// use (`--param-prefetch`).
inline constexpr int kMaxParamPrefetch = 64;

/// Inserts, on every rank, one UNSHARD per (stage, copy) the rank computes,
/// `prefetch` compute actions (Compute or Overlap) before the first that
/// uses the stage (at the start of the rank's list when there are fewer),
/// and one RESHARD right after the last. UNSHARDs that land at the same
/// place keep the order of their stages' first uses. Fails on a schedule
/// that already has them or a prefetch outside [0, kMaxParamPrefetch].
Status insertParamGathers(Schedule &s, int prefetch);

/// Whether any rank's list holds an UNSHARD or RESHARD.
bool hasParamGathers(const Schedule &s);

} // namespace pipeforge::sched

#endif // PIPEFORGE_SCHEDULE_PARAMGATHERS_H
