//===- ScheduleConversion.h - pp.schedule <-> schedule library --*- C++ -*-===//
//
// The passes are thin adapters: they turn a pp.schedule into the plain C++
// sched::Schedule, call the library, and write the result back as IR.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_DIALECT_PP_TRANSFORMS_SCHEDULECONVERSION_H
#define PIPEFORGE_DIALECT_PP_TRANSFORMS_SCHEDULECONVERSION_H

#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Schedule/Action.h"
#include "pipeforge/Schedule/Simulator.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace pipeforge::pp {

/// Reads a (verified) pp.schedule into the library's form.
sched::Schedule toLibrarySchedule(ScheduleOp op);

/// Builds a pp.schedule from the library's form at the builder's point.
ScheduleOp buildScheduleOp(mlir::OpBuilder &b, mlir::Location loc,
                           const sched::Schedule &s);

/// Replaces the rank programs of `op` with those of `s` (same shape).
void replaceRankPrograms(ScheduleOp op, const sched::Schedule &s);

/// The cost model of the passes' cost options for `s`: times as given,
/// memory in units of M_B (a stage of an S-stage copy on p ranks is p/S).
sched::CostModel makeCostModel(const sched::Schedule &s, double tf, double tb,
                               double tw, double tfb, double tcomm,
                               double memW);

/// Writes the actions a library pass added to `s` (read from `op` with
/// toLibrarySchedule, then only added to) into `op`'s rank programs: each
/// action `added` selects is built by `create` at its place among the old
/// ops (pp.recv_post, which the library does not hold, stays where it is).
void insertLibraryActions(
    ScheduleOp op, const sched::Schedule &s,
    llvm::function_ref<bool(const sched::Action &)> added,
    llvm::function_ref<void(mlir::OpBuilder &, const sched::Action &)> create);

/// The op of rank `rank`'s program at position `step`, or null.
mlir::Operation *actionOp(ScheduleOp op, int rank, size_t step);

} // namespace pipeforge::pp

#endif
