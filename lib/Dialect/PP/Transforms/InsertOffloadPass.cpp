//===- InsertOffloadPass.cpp - --pp-insert-offload ------------------------===//
//
// Activation offload's copies (pp.offload / pp.reload), chosen and placed
// by the schedule library (sched::planOffload, sched::insertOffload) and
// written into the rank programs in place: every other op stays as it is
// (messages, split receives, gathers, fused pairs' component programs).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Schedule/Offload.h"

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPINSERTOFFLOAD
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

namespace {
struct InsertOffloadPass
    : public pp::impl::PPInsertOffloadBase<InsertOffloadPass> {
  using PPInsertOffloadBase::PPInsertOffloadBase;

  void runOnOperation() override {
    int gap = mode == "auto"  ? sched::kOffloadGapAuto
              : mode == "all" ? sched::kOffloadGapAll
                              : 0;
    if (!gap) {
      getOperation().emitError()
          << "--pp-insert-offload: mode must be auto or all (got '" << mode
          << "')";
      return signalPassFailure();
    }
    for (ScheduleOp op : getOperation().getOps<ScheduleOp>()) {
      sched::Schedule s = toLibrarySchedule(op);
      if (sched::Status st = sched::insertOffload(s, gap); !st) {
        op.emitError() << "cannot insert activation offload: " << st.message();
        return signalPassFailure();
      }
      insertLibraryActions(
          op, s, [](const sched::Action &a) { return a.isStashCopy(); },
          [&](OpBuilder &b, const sched::Action &a) {
            if (a.kind == sched::ActionKind::Offload)
              OffloadOp::create(b, op.getLoc(), a.work.stage, a.work.mb,
                                a.work.copy);
            else
              ReloadOp::create(b, op.getLoc(), a.work.stage, a.work.mb,
                               a.work.copy);
          });
    }
  }
};
} // namespace
