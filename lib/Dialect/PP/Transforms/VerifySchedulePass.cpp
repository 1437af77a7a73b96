//===- VerifySchedulePass.cpp - --pp-verify-schedule ----------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Schedule/Verify.h"

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPVERIFYSCHEDULE
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

namespace {
struct VerifySchedulePass
    : public pp::impl::PPVerifyScheduleBase<VerifySchedulePass> {
  using PPVerifyScheduleBase::PPVerifyScheduleBase;

  void runOnOperation() override {
    bool ok = true;
    for (ScheduleOp op : getOperation().getOps<ScheduleOp>()) {
      sched::Schedule s = toLibrarySchedule(op);
      sched::VerifyOptions opts;
      opts.cost = makeCostModel(s, tf, tb, tw, tfb, tcomm, memW);
      if (memLimit > 0)
        opts.memLimit = memLimit;
      sched::Status st = sched::verify(s, opts);
      if (st)
        continue;
      ok = false;
      // Point at the offending action when the library names one.
      Operation *at = st.rank() >= 0 && st.step() >= 0
                          ? actionOp(op, st.rank(), st.step())
                          : nullptr;
      (at ? at : op.getOperation())->emitError()
          << "invalid schedule: " << st.message();
    }
    if (!ok)
      signalPassFailure();
    markAllAnalysesPreserved();
  }
};
} // namespace
