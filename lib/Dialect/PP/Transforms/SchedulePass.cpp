//===- SchedulePass.cpp - --pp-schedule -----------------------------------===//
//
// Thin adapter: pick the placement from the pp.pipeline (or the options),
// call the schedule library's generator, write the result as pp.schedule.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Generators.h"

#include <cstdlib>

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPSCHEDULE
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

/// The placement a schedule kind runs on.
static PlacementKind placementFor(sched::ScheduleKind k) {
  switch (k) {
  case sched::ScheduleKind::Interleaved:
    return PlacementKind::interleaved;
  case sched::ScheduleKind::ZBV:
  case sched::ScheduleKind::DualPipeV:
    return PlacementKind::v;
  case sched::ScheduleKind::DualPipe:
    return PlacementKind::dual;
  default:
    return PlacementKind::linear;
  }
}

namespace {
struct SchedulePass : public pp::impl::PPScheduleBase<SchedulePass> {
  using PPScheduleBase::PPScheduleBase;

  /// Generates for `ranks` ranks; emits an error at `loc` on failure.
  /// kind=auto: the automatic scheduler on the cost options.
  FailureOr<sched::Schedule> generateAuto(Location loc, int ranks, bool v) {
    sched::AutoOptions o;
    o.ranks = ranks;
    o.microbatches = microbatches > 0 ? microbatches : 2 * ranks;
    o.vShape = v;
    o.cost.tf = tf;
    o.cost.tb = tb;
    o.cost.tw = tw;
    o.cost.tcomm = tcomm;
    o.cost.memB = v ? 0.5 : 1.0; // M_B units: a V stage is half a rank
    o.cost.memW = o.cost.memB * memW;
    if (!memLimit.empty()) {
      std::string str = memLimit;
      double scale = 1;
      if (str.back() == 'p') {
        scale = ranks;
        str.pop_back();
      }
      char *end = nullptr;
      double d = std::strtod(str.c_str(), &end);
      if (str.empty() || *end != '\0' || d < 0) {
        emitError(loc) << "mem-limit expects a number of M_B or <k>p, got '"
                       << memLimit << "'";
        return failure();
      }
      o.memLimit = d * scale;
    }
    o.useIlp = timeLimit > 0;
    o.ilpTimeLimit = timeLimit;
    o.ilpGap = gap;
    auto r = sched::autoSchedule(o);
    if (!r) {
      emitError(loc) << "cannot build schedule 'auto': " << r.message();
      return failure();
    }
    return r->schedule;
  }

  FailureOr<sched::Schedule> generate(Location loc, sched::ScheduleKind k,
                                      int ranks, int chunksPerRank) {
    sched::GenOptions opts;
    opts.ranks = ranks;
    opts.chunksPerRank = chunksPerRank;
    opts.microbatches = microbatches > 0
                            ? microbatches
                            : sched::minMicrobatches(k, ranks, chunksPerRank);
    auto s = sched::generate(k, opts);
    if (!s) {
      emitError(loc) << "cannot build schedule '" << kind << "': "
                     << s.message();
      return failure();
    }
    return s.take();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto k = sched::parseScheduleKind(kind);
    if (!k) {
      module.emitError() << "unknown schedule kind '" << kind
                         << "'; expected one of: "
                         << "gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe "
                            "dualpipev auto";
      return signalPassFailure();
    }
    bool isAuto = *k == sched::ScheduleKind::Auto;
    if (isAuto && autoPlacement != "linear" && autoPlacement != "v") {
      module.emitError() << "placement expects linear or v, got '"
                         << autoPlacement << "'";
      return signalPassFailure();
    }

    SmallVector<PipelineOp> pipelines(module.getOps<PipelineOp>());
    OpBuilder b(module.getContext());
    if (pipelines.empty()) {
      if (ranks < 1) {
        module.emitError() << "--pp-schedule: the module has no pp.pipeline; "
                              "give ranks=N (N >= 1)";
        return signalPassFailure();
      }
      auto s = isAuto ? generateAuto(module.getLoc(), ranks, autoPlacement == "v")
                      : generate(module.getLoc(), *k, ranks, chunks);
      if (failed(s))
        return signalPassFailure();
      b.setInsertionPointToEnd(module.getBody());
      buildScheduleOp(b, module.getLoc(), *s);
      return;
    }

    for (PipelineOp p : pipelines) {
      PlacementKind want = placementFor(*k);
      if (isAuto && p.getPlacement() == PlacementKind::v)
        want = PlacementKind::v;
      if (p.getPlacement() != want) {
        p.emitError() << "schedule '" << kind << "' needs placement '"
                      << stringifyPlacementKind(want) << "', but @"
                      << p.getSymName() << " is placed '"
                      << stringifyPlacementKind(p.getPlacement()) << "'";
        return signalPassFailure();
      }
      if (ranks > 0 && ranks != (int)p.getNumRanks()) {
        p.emitError() << "ranks=" << int(ranks) << " disagrees with @"
                      << p.getSymName() << " (" << p.getNumRanks()
                      << " ranks)";
        return signalPassFailure();
      }
      int chunksPerRank = p.getNumStages() / p.getNumRanks();
      auto s = isAuto ? generateAuto(p.getLoc(), p.getNumRanks(),
                                     p.getPlacement() == PlacementKind::v)
                      : generate(p.getLoc(), *k, p.getNumRanks(), chunksPerRank);
      if (failed(s))
        return signalPassFailure();
      b.setInsertionPointAfter(p);
      buildScheduleOp(b, p.getLoc(), *s);
    }
  }
};
} // namespace
