//===- SchedulePass.cpp - --pp-schedule -----------------------------------===//
//
// Thin adapter: pick the placement from the pp.pipeline (or the options),
// call the schedule library's generator, write the result as pp.schedule.
// kind=auto costs the stages from their bodies when they have them
// (StageCostModel.h).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/ScheduleConversion.h"
#include "pipeforge/Dialect/PP/Transforms/StageCostModel.h"
#include "pipeforge/Schedule/AutoScheduler.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Job.h"
#include "pipeforge/Schedule/MemoryLimit.h"

#include <algorithm>
#include <optional>

namespace pipeforge::pp {
#define GEN_PASS_DEF_PPSCHEDULE
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"
} // namespace pipeforge::pp

using namespace mlir;
using namespace pipeforge;
using namespace pipeforge::pp;

/// The placement a schedule kind runs on.
namespace {
struct SchedulePass : public pp::impl::PPScheduleBase<SchedulePass> {
  using PPScheduleBase::PPScheduleBase;

  /// Generates for `ranks` ranks; emits an error at `loc` on failure.
  /// kind=auto: the automatic scheduler, on the costs of `pipeline`'s stage
  /// bodies when it has them, else on the cost options.
  FailureOr<sched::Schedule> generateAuto(Location loc, int ranks, bool v,
                                          PipelineOp pipeline = nullptr) {
    sched::AutoOptions o;
    o.ranks = ranks;
    o.microbatches = microbatches > 0 ? microbatches : 2 * ranks;
    o.vShape = v;
    // tf/tb/tw: one rank's share of the model (as M_B), so a V stage, half
    // of a rank's share, takes half of them.
    double share = v ? 0.5 : 1.0;
    o.cost.tf = tf * share;
    o.cost.tb = tb * share;
    o.cost.tw = tw * share;
    o.cost.tcomm = tcomm;
    o.cost.memB = v ? 0.5 : 1.0; // M_B units: a V stage is half a rank
    o.cost.memW = o.cost.memB * memW;

    std::optional<StageCosts> costs;
    if (pipeline) {
      if (tpBytesPerTime < 0 || (tpBytesPerTime > 0 && flopsPerTime <= 0)) {
        emitError(loc) << "tp-bytes-per-time must be >= 0 and needs "
                          "flops-per-time > 0 (both in one time unit)";
        return failure();
      }
      if (bytesPerElement < 1) {
        emitError(loc) << "bytes-per-element must be >= 1";
        return failure();
      }
      auto c = collectStageCosts(pipeline, bytesPerElement);
      if (failed(c))
        return failure();
      costs = std::move(*c);
      if (costs && costs->bytesPerMB() <= 0)
        costs.reset(); // nothing stashes: keep the uniform model
    }
    if (costs)
      o.cost = stageCostModel(*costs, flopsPerTime, o.cost.tf, o.cost.tb,
                              o.cost.tw, tcomm, o.cost.memB, o.cost.memW,
                              tpBytesPerTime);

    std::optional<sched::MemoryLimit> limit;
    if (!memLimit.empty()) {
      auto l = sched::parseMemoryLimit(memLimit);
      if (!l) {
        emitError(loc) << "mem-limit: " << l.message();
        return failure();
      }
      limit = *l;
      auto d = sched::resolveMemoryLimit(
          *l, ranks, costs ? costs->bytesPerMB() : 0,
          "no stage bodies to cost it (run --pp-partition first); give the "
          "limit in M_B units or <k>p");
      if (!d) {
        emitError(loc) << "mem-limit: " << d.message();
        return failure();
      }
      o.memLimit = *d;
    }

    // An impossible limit, in bytes where the cost model gives them.
    if (costs && limit && o.memLimit + 1e-9 < sched::minFeasibleMemLimit(o)) {
      sched::Placement pl = v ? sched::Placement::vShape(ranks)
                              : sched::Placement::linear(ranks);
      std::vector<int> rankOf(pl.numStages);
      for (int s = 0; s < pl.numStages; ++s)
        rankOf[s] = pl.rank(0, s);
      auto [rank, bytes] = costs->maxRankStash(rankOf);
      std::string stages;
      for (int s = 0; s < pl.numStages; ++s)
        if (rankOf[s] == rank)
          stages += (stages.empty() ? "" : " and ") + std::to_string(s);
      emitError(loc) << "cannot build schedule 'auto': memory limit '"
                     << memLimit << "' (" << sched::formatBytes(o.memLimit *
                                                   costs->bytesPerMB())
                     << ") is impossible: one microbatch's activations on "
                     << "rank " << rank << " (stage" << (v ? "s " : " ")
                     << stages << ") need " << sched::formatBytes(bytes)
                     << " (the stash of its forward ops at "
                     << unsigned(bytesPerElement)
                     << " bytes per element), so no schedule fits";
      return failure();
    }

    o.useIlp = timeLimit > 0;
    o.ilpTimeLimit = timeLimit;
    o.ilpGap = gap;
    auto r = sched::autoSchedule(o);
    if (!r) {
      InFlightDiagnostic d = emitError(loc)
                             << "cannot build schedule 'auto': " << r.message();
      if (costs)
        d << " (memory in units of M_B = "
          << sched::formatBytes(costs->bytesPerMB())
          << ": one microbatch's stash over all stages / ranks)";
      return failure();
    }
    return r->schedule;
  }

  /// kind=auto placement=any without a pp.pipeline: what pipeforge-sched
  /// --schedule auto does (sched::runScheduleJob): the search on the linear
  /// and the V placement and every single-copy handcrafted order under
  /// mem-limit, on the uniform per-rank costs; the fastest wins.
  FailureOr<sched::Schedule> generateAnyPlacement(Location loc, int ranks) {
    // Without stage bodies a byte limit cannot be resolved: the linear
    // search reports why.
    if (auto l = sched::parseMemoryLimit(memLimit); !l || l->isBytes())
      if (!memLimit.empty())
        return generateAuto(loc, ranks, /*v=*/false);
    sched::ScheduleJob j;
    j.schedule = "auto";
    j.ranks = ranks;
    j.microbatches = microbatches > 0 ? microbatches : 2 * ranks;
    j.chunks = chunks;
    j.computeOnly = true;
    j.tf = tf;
    j.tb = tb;
    j.tw = tw;
    j.tfb = tfb;
    j.tcomm = tcomm;
    j.memW = memW;
    j.memLimit = memLimit;
    j.useIlp = timeLimit > 0;
    j.timeLimit = timeLimit > 0 ? double(timeLimit) : 10.0;
    j.gap = gap;
    auto r = sched::runScheduleJob(j);
    if (!r) {
      emitError(loc) << "cannot build schedule 'auto': " << r.message();
      return failure();
    }
    sched::Schedule s = std::move(r->schedule);
    for (auto &prog : s.programs) // compute actions only, as the others
      prog.erase(std::remove_if(prog.begin(), prog.end(),
                                [](const sched::Action &a) {
                                  return !a.isCompute();
                                }),
                 prog.end());
    s.hasComm = false;
    return s;
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

  /// kind=none: the single-process reference on a one-rank pipeline.
  FailureOr<sched::Schedule> generateNone(Location loc, int stages) {
    auto s = sched::generateNone(stages, microbatches > 0 ? microbatches : 1);
    if (!s) {
      emitError(loc) << "cannot build schedule 'none': " << s.message();
      return failure();
    }
    return s.take();
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    const bool isNone = kind == "none";
    auto k = sched::parseScheduleKind(kind);
    if (!k && !isNone) {
      module.emitError() << "unknown schedule kind '" << kind
                         << "'; expected one of: "
                         << "gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe "
                            "dualpipev chimera v-half v-min auto none";
      return signalPassFailure();
    }
    bool isAuto = k && *k == sched::ScheduleKind::Auto;
    if (isAuto && autoPlacement != "linear" && autoPlacement != "v" &&
        autoPlacement != "any") {
      module.emitError() << "placement expects any, linear or v, got '"
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
      if (isNone && ranks != 1) {
        module.emitError() << "schedule 'none' runs on 1 rank (got ranks="
                           << int(ranks) << ")";
        return signalPassFailure();
      }
      auto s = isNone   ? generateNone(module.getLoc(), 1)
               : isAuto && autoPlacement == "any"
                   ? generateAnyPlacement(module.getLoc(), ranks)
               : isAuto ? generateAuto(module.getLoc(), ranks,
                                       autoPlacement == "v")
                        : generate(module.getLoc(), *k, ranks, chunks);
      if (failed(s))
        return signalPassFailure();
      b.setInsertionPointToEnd(module.getBody());
      buildScheduleOp(b, module.getLoc(), *s);
      return;
    }

    for (PipelineOp p : pipelines) {
      int chunksPerRank = p.getNumStages() / p.getNumRanks();
      auto layout = sched::stageLayoutFor(
          kind, isNone ? 1 : int(p.getNumRanks()), std::max(chunksPerRank, 2),
          isAuto && p.getPlacement() == PlacementKind::v);
      if (!layout) {
        p.emitError() << "cannot build schedule '" << kind
                      << "': " << layout.message();
        return signalPassFailure();
      }
      PlacementKind want = *symbolizePlacementKind(layout->placement);
      if (isNone && p.getNumRanks() != 1) {
        p.emitError() << "schedule 'none' runs every stage on one rank, but @"
                      << p.getSymName() << " has " << p.getNumRanks()
                      << " ranks";
        return signalPassFailure();
      }
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
      auto s = isNone   ? generateNone(p.getLoc(), int(p.getNumStages()))
               : isAuto ? generateAuto(p.getLoc(), p.getNumRanks(),
                                       p.getPlacement() == PlacementKind::v, p)
                        : generate(p.getLoc(), *k, p.getNumRanks(),
                                   chunksPerRank);
      if (failed(s))
        return signalPassFailure();
      b.setInsertionPointAfter(p);
      buildScheduleOp(b, p.getLoc(), *s);
    }
  }
};
} // namespace
