//===- VerifySchedulePass.cpp - --pp-verify-schedule ----------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Dialect/PP/Transforms/StageCostModel.h"
#include "pipeforge/Schedule/MemoryLimit.h"
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

  /// The stage costs of the module's one pp.pipeline, for a byte limit on
  /// schedule `s`; emits an error at `op` when there are none.
  FailureOr<StageCosts> bodyCosts(ScheduleOp op, const sched::Schedule &s) {
    SmallVector<PipelineOp> pipelines(getOperation().getOps<PipelineOp>());
    auto none = [&](const Twine &why) {
      op.emitError() << "mem-limit '" << memLimit
                     << "' is in bytes, but " << why
                     << "; give the limit in M_B units or <k>p";
      return failure();
    };
    if (pipelines.size() != 1)
      return none("the module needs exactly one pp.pipeline with stage "
                  "bodies to cost it (it has " +
                  Twine(pipelines.size()) + ")");
    PipelineOp p = pipelines.front();
    if ((int)p.getNumStages() != s.placement.numStages ||
        (int)p.getNumRanks() != s.numRanks())
      return none("@" + p.getSymName() +
                  " does not have this schedule's stages and ranks");
    auto c = collectStageCosts(p, bytesPerElement);
    if (failed(c))
      return failure();
    if (!*c || (*c)->bytesPerMB() <= 0)
      return none("the stages of @" + p.getSymName() +
                  " have no bodies that stash activations (run "
                  "--pp-partition first)");
    return std::move(**c);
  }

  void runOnOperation() override {
    bool ok = true;
    std::optional<sched::MemoryLimit> limit;
    if (!memLimit.empty()) {
      auto l = sched::parseMemoryLimit(memLimit);
      if (!l) {
        getOperation().emitError() << "mem-limit: " << l.message();
        return signalPassFailure();
      }
      if (l->value > 0) // 0 = none, as before
        limit = *l;
    }
    if (bytesPerElement < 1) {
      getOperation().emitError() << "bytes-per-element must be >= 1";
      return signalPassFailure();
    }
    for (ScheduleOp op : getOperation().getOps<ScheduleOp>()) {
      sched::Schedule s = toLibrarySchedule(op);
      sched::VerifyOptions opts;
      std::string bytesNote;
      opts.cost = makeCostModel(s, tf, tb, tw, tfb, tcomm, memW);
      if (limit && limit->isBytes()) {
        // Bytes: each stage's stash from its body; the limit in the same
        // unit (one M_B = the stash over all stages / ranks).
        auto c = bodyCosts(op, s);
        if (failed(c)) {
          ok = false;
          continue;
        }
        sched::CostModel body = stageCostModel(
            *c, 0, tf, tb, tw, tcomm, opts.cost.memB, opts.cost.memW);
        opts.cost.memBStage = body.memBStage;
        opts.cost.memWStage = body.memWStage;
        opts.memLimit = limit->value / c->bytesPerMB();
        bytesNote = "memory in units of M_B = " +
                    sched::formatBytes(c->bytesPerMB()) +
                    " (one microbatch's stash over all stages / ranks); "
                    "mem-limit '" + memLimit.getValue() + "' = " +
                    sched::formatBytes(limit->value);
      } else if (limit) {
        auto d = sched::resolveMemoryLimit(*limit, s.numRanks(), 0);
        opts.memLimit = *d;
      }
      sched::Status st = sched::verify(s, opts);
      if (st)
        continue;
      ok = false;
      // Point at the offending action when the library names one.
      Operation *at = st.rank() >= 0 && st.step() >= 0
                          ? actionOp(op, st.rank(), st.step())
                          : nullptr;
      InFlightDiagnostic d = (at ? at : op.getOperation())->emitError()
                             << "invalid schedule: " << st.message();
      if (!bytesNote.empty())
        d.attachNote() << bytesNote;
    }
    if (!ok)
      signalPassFailure();
    markAllAnalysesPreserved();
  }
};
} // namespace
