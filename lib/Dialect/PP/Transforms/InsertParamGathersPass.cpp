//===- InsertParamGathersPass.cpp - --pp-insert-param-gathers -------------===//
//
// ZeRO-3's gathers (pp.unshard) and releases (pp.reshard), placed by the
// schedule library (sched::insertParamGathers) and written into the rank
// programs in place: every other op stays as it is (messages, split
// receives, fused pairs' component programs).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Schedule/ParamGathers.h"

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPINSERTPARAMGATHERS
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

namespace {
struct InsertParamGathersPass
    : public pp::impl::PPInsertParamGathersBase<InsertParamGathersPass> {
  using PPInsertParamGathersBase::PPInsertParamGathersBase;

  void runOnOperation() override {
    for (ScheduleOp op : getOperation().getOps<ScheduleOp>()) {
      sched::Schedule s = toLibrarySchedule(op);
      if (sched::Status st = sched::insertParamGathers(s, prefetch); !st) {
        op.emitError() << "cannot insert parameter gathers: " << st.message();
        return signalPassFailure();
      }
      insertLibraryActions(
          op, s, [](const sched::Action &a) { return a.isParamGather(); },
          [&](OpBuilder &b, const sched::Action &a) {
            if (a.kind == sched::ActionKind::Unshard)
              UnshardOp::create(b, op.getLoc(), a.work.stage, a.work.copy);
            else
              ReshardOp::create(b, op.getLoc(), a.work.stage, a.work.copy);
          });
    }
  }
};
} // namespace
