//===- InsertCommPass.cpp - --pp-insert-comm ------------------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Schedule/CommInsertion.h"

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPINSERTCOMM
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

namespace {
struct InsertCommPass : public pp::impl::PPInsertCommBase<InsertCommPass> {
  using PPInsertCommBase::PPInsertCommBase;

  void runOnOperation() override {
    for (ScheduleOp op : getOperation().getOps<ScheduleOp>()) {
      sched::Schedule s = toLibrarySchedule(op);
      if (s.hasComm) {
        op.emitError("already has messages; --pp-insert-comm expects a "
                     "compute-only schedule");
        return signalPassFailure();
      }
      sched::CostModel cost = makeCostModel(s, tf, tb, tw, tfb, tcomm, memW);
      if (sched::Status st = sched::insertComm(s, cost); !st) {
        op.emitError() << "cannot insert messages: " << st.message();
        return signalPassFailure();
      }
      replaceRankPrograms(op, s);
    }
  }
};
} // namespace
