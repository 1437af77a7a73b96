//===- SimulatePass.cpp - --pp-simulate -----------------------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Schedule/Export.h"
#include "pipeforge/Schedule/Simulator.h"
#include "pipeforge/Support/OutputFile.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPSIMULATE
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

/// Writes `text` to `path`; reports failure at `loc`.
static LogicalResult writeFile(Location loc, StringRef path,
                               const std::string &text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return emitError(loc) << "cannot write '" << path << "': " << ec.message();
  os << text;
  // A full device is an error at the op, not "LLVM ERROR: IO failure".
  if (auto err = finishStream(os, path))
    return emitError(loc) << *err;
  return success();
}

namespace {
struct SimulatePass : public pp::impl::PPSimulateBase<SimulatePass> {
  using PPSimulateBase::PPSimulateBase;

  void runOnOperation() override {
    llvm::raw_ostream &os = llvm::outs();
    int index = 0;
    for (ScheduleOp op : getOperation().getOps<ScheduleOp>()) {
      sched::Schedule s = toLibrarySchedule(op);
      sched::CostModel cost = makeCostModel(s, tf, tb, tw, tfb, tcomm, memW);
      auto r = sched::simulate(s, cost);
      if (!r) {
        op.emitError() << "simulation failed: " << r.message();
        return signalPassFailure();
      }
      os << "schedule " << op.getKind() << ": ranks " << s.numRanks()
         << ", stages " << s.placement.numStages << ", microbatches "
         << s.numMicrobatches << "\n";
      os << llvm::format("  makespan %.4f  bubble_rate %.4f  "
                         "zb_bubble_rate %.4f\n",
                         r->makespan, r->bubbleRate, r->zbBubbleRate);
      for (size_t i = 0; i < r->ranks.size(); ++i) {
        const sched::RankStats &rs = r->ranks[i];
        os << llvm::format("  rank %zu: busy %.4f  idle %.4f  peak_activation "
                           "%.4f M_B  exposed_comm %.4f\n",
                           i, rs.busy, r->makespan - rs.busy, rs.peakMemory,
                           rs.exposedComm);
      }
      if (grid)
        os << sched::exportTextGrid(s, *r);
      // With several schedules, number the output files.
      auto pathFor = [&](const std::string &p) {
        return index == 0 ? p : p + "." + std::to_string(index);
      };
      if (!trace.empty() && failed(writeFile(op.getLoc(), pathFor(trace),
                                             sched::exportTrace(s, *r))))
        return signalPassFailure();
      if (!svg.empty() &&
          failed(writeFile(op.getLoc(), pathFor(svg), sched::exportSvg(s, *r))))
        return signalPassFailure();
      ++index;
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
