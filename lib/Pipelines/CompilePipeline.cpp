//===- CompilePipeline.cpp - The compile pass pipeline --------------------===//

#include "pipeforge/Pipelines/CompilePipeline.h"

#include "PlanDetail.h"

#include "pipeforge/Dialect/NN/Analysis/CostSum.h"
#include "pipeforge/Dialect/NN/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/IR/PPOps.h"
#include "pipeforge/Dialect/PP/Transforms/StageCostModel.h"
#include "pipeforge/Schedule/Generators.h"
#include "pipeforge/Schedule/Job.h"
#include "pipeforge/Schedule/MemoryLimit.h"
#include "pipeforge/Schedule/ParamGathers.h"
#include "pipeforge/Target/Program/Prepare.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

#include <cstdio>

using namespace mlir;

namespace pipeforge::pipelines {

Status resolveCompileOptions(CompileOptions &o) {
  if (o.recompute == "true" || o.recompute.empty())
    o.recompute = "full";
  else if (o.recompute == "false")
    o.recompute = "none";
  if (o.recompute != "none" && o.recompute != "full" &&
      o.recompute != "selective")
    return Status::error("--recompute must be none, full or selective "
                                "(got '" +
                                o.recompute + "')");
  const bool none = o.schedule == "none";
  auto kind = sched::parseScheduleKind(o.schedule);
  if (!none && !kind)
    return Status::error(
        "unknown schedule '" + o.schedule +
        "' (expected one of: " + sched::scheduleKindNames() + " none)");
  if (none) {
    if (o.ranks != 0 && o.ranks != 1)
      return Status::error(
          "--schedule none is the single-process reference: it needs "
          "--ranks 1 (got " +
          std::to_string(o.ranks) + ")");
    o.ranks = 1;
  } else if (o.ranks == 0) {
    o.ranks = 2;
  }
  if (o.ranks < 1)
    return Status::error("--ranks must be at least 1 (got " +
                                std::to_string(o.ranks) + ")");
  if (o.tp < 1)
    return Status::error("--tp must be at least 1 (got " +
                                std::to_string(o.tp) + ")");
  if (o.sequenceParallel && o.tp < 2)
    return Status::error(
        "--sequence-parallel needs tensor parallelism (--tp 2 or more)");
  if (o.schedule == "interleaved" && o.chunks < 2)
    return Status::error("--chunks must be at least 2 (got " +
                                std::to_string(o.chunks) + ")");
  if (o.microbatches < 0)
    return Status::error("--microbatches must be positive (got " +
                                std::to_string(o.microbatches) + ")");
  if (o.placement != "any" && o.placement != "linear" && o.placement != "v")
    return Status::error("--placement must be any, linear or v (got '" +
                                o.placement + "')");
  if (o.placement == "v" && kind != sched::ScheduleKind::Auto)
    return Status::error("--placement applies to --schedule auto "
                                "only; the other schedules imply theirs");
  if (kind != sched::ScheduleKind::Auto)
    o.placement = "linear"; // unused: the schedule implies its placement
  auto layout =
      sched::stageLayoutFor(o.schedule, o.ranks, o.chunks, o.placement == "v");
  if (!layout)
    return layout.status();
  if (!o.recomputeStages.empty() && o.recompute == "none")
    return Status::error(
        "--recompute-stages needs --recompute=full or --recompute=selective");
  for (int64_t s : o.recomputeStages)
    if (s < 0 || s >= layout->stages)
      return Status::error(
          "--recompute-stages: stage " + std::to_string(s) + " is not one of " +
          o.schedule + "'s " + std::to_string(layout->stages) + " stages (0.." +
          std::to_string(layout->stages - 1) + ")");
  if (none) {
    if (o.microbatches == 0)
      o.microbatches = 1;
  } else if (*kind != sched::ScheduleKind::Auto) {
    int32_t minMb = sched::minMicrobatches(*kind, o.ranks, o.chunks);
    if (o.microbatches == 0)
      o.microbatches = minMb;
    else if (o.microbatches < minMb)
      return Status::error(
          "--microbatches " + std::to_string(o.microbatches) +
          " is too few for " + o.schedule + " on " + std::to_string(o.ranks) +
          " ranks (needs at least " + std::to_string(minMb) + ")");
  } else if (o.microbatches == 0) {
    o.microbatches = 2 * o.ranks;
  }
  if (!o.memLimit.empty())
    if (auto m = sched::parseMemoryLimit(o.memLimit); !m)
      return Status::error("--mem-limit: " + m.message());
  if (o.dp < 1)
    return Status::error("--dp must be at least 1 (got " +
                         std::to_string(o.dp) + ")");
  if (o.ep < 1)
    return Status::error("--ep must be at least 1 (got " +
                         std::to_string(o.ep) + ")");
  if (o.microbatchSize < 1)
    return Status::error("--microbatch-size must be at least 1 (got " +
                         std::to_string(o.microbatchSize) + ")");
  // -1: not given; 0, or with --device-memory the lowest level that fits
  // (fitDeviceMemory).
  if (o.zero < -1 || o.zero > 3)
    return Status::error("--zero must be 0, 1, 2 or 3 (got " +
                         std::to_string(o.zero) + ")");
  if (o.zero < 0 && o.deviceMemory.empty())
    o.zero = 0;
  if (!o.deviceMemory.empty()) {
    auto d = sched::parseMemoryLimit(o.deviceMemory);
    if (!d)
      return Status::error("--device-memory: " + d.message());
    if (!d->isBytes() || d->value <= 0)
      return Status::error("--device-memory must be a positive number of "
                           "bytes with a suffix (e.g. 80GB, 512MiB; got '" +
                           o.deviceMemory + "')");
  }
  if (o.paramPrefetch < 0 || o.paramPrefetch > sched::kMaxParamPrefetch)
    return Status::error("--param-prefetch must be in [0, " +
                         std::to_string(sched::kMaxParamPrefetch) + "] (got " +
                         std::to_string(o.paramPrefetch) + ")");
  if (o.offloadActivations != "off" && o.offloadActivations != "auto" &&
      o.offloadActivations != "all")
    return Status::error("--offload-activations must be off, auto or all "
                         "(got '" +
                         o.offloadActivations + "')");
  if (o.seqLen < 0)
    return Status::error("--seq-len must be positive (got " +
                         std::to_string(o.seqLen) + ")");
  return Status::ok();
}

int detail::countLayers(ModuleOp module) {
  auto model = module.lookupSymbol<func::FuncOp>("model");
  if (!model)
    return 0;
  return int(nn::LayerIndex::of(model).size());
}

void detail::addStagePasses(OpPassManager &pm, const CompileOptions &o,
                            int stages, const std::string &placement) {
  if (o.tp > 1) {
    nn::NNShardTensorOptions shard;
    shard.tp = o.tp;
    shard.sequenceParallel = o.sequenceParallel;
    pm.addPass(nn::createNNShardTensor(shard));
  }
  pp::PPPartitionOptions part;
  part.stages = stages;
  part.placement = placement;
  part.ranks = o.ranks;
  pm.addPass(pp::createPPPartition(part));
  pm.addPass(pp::createPPSplitBackward());
  if (o.recompute != "none") {
    pp::PPRecomputeOptions rc;
    rc.policy = o.recompute;
    rc.stages.assign(o.recomputeStages.begin(), o.recomputeStages.end());
    pm.addPass(pp::createPPRecompute(rc));
  }
}

namespace {
using detail::addStagePasses;
using detail::countLayers;

/// The stage costs of a linear partition of a copy of `module` over the
/// ranks; std::nullopt when it cannot be costed.
std::optional<pp::StageCosts> linearStageCosts(ModuleOp module,
                                               const CompileOptions &o) {
  OwningOpRef<ModuleOp> copy = module.clone();
  PassManager pm(module.getContext());
  addStagePasses(pm, o, o.ranks, "linear");
  ScopedDiagnosticHandler quiet(module.getContext(),
                                [](Diagnostic &) { return success(); });
  if (failed(pm.run(*copy)))
    return std::nullopt;
  for (auto p : copy->getOps<pp::PipelineOp>()) {
    auto c = pp::collectStageCosts(p, detail::activationBytesPerElement(o));
    if (succeeded(c) && *c)
      return **c;
  }
  return std::nullopt;
}

double sum(const std::vector<double> &v) {
  double s = 0;
  for (double x : v)
    s += x;
  return s;
}

/// The comparison's per-rank costs from the model: F, B and W of one
/// rank's share (the model's FLOPs / ranks) relative to F, and M_W / M_B.
/// The uniform defaults stay where the model has no FLOPs or no stash.
void modelCostsPerRank(const pp::StageCosts &c, sched::ScheduleJob &j) {
  double f = sum(c.fwdFlops), b = sum(c.bwdInputFlops),
         w = sum(c.bwdWeightFlops);
  if (f > 0 && b > 0 && w > 0) {
    j.tf = 1;
    j.tb = b / f;
    j.tw = w / f;
  }
  double stash = sum(c.stashBytes), wStash = sum(c.weightStashBytes);
  if (stash > 0)
    j.memW = wStash / stash;
}
} // namespace

Status chooseAutoPlacement(ModuleOp module, CompileOptions &o,
                                  std::string &note) {
  if (o.schedule != "auto" || o.placement != "any")
    return Status::ok();
  // Whatever fails below, the linear search runs and reports it.
  o.placement = "linear";
  if (countLayers(module) < 2 * o.ranks) {
    note = "the linear placement: the model has too few layers for a V";
    return Status::ok();
  }
  sched::ScheduleJob j;
  j.schedule = "auto";
  j.ranks = o.ranks;
  j.microbatches = o.microbatches;
  j.chunks = o.chunks;
  j.computeOnly = true;
  // The candidates are compared on the model's own F : B : W ratio (the
  // searches themselves then run on the chosen placement's stage costs).
  std::optional<pp::StageCosts> costs = linearStageCosts(module, o);
  if (costs)
    modelCostsPerRank(*costs, j);
  if (!o.memLimit.empty()) {
    auto l = sched::parseMemoryLimit(o.memLimit);
    if (!l)
      return Status::error("--mem-limit: " + l.message());
    double perMB = l->isBytes() && costs ? costs->bytesPerMB() : 0;
    auto v = sched::resolveMemoryLimit(*l, o.ranks, perMB, "");
    if (!v)
      return Status::ok();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", *v);
    j.memLimit = buf;
  }
  auto r = sched::runScheduleJob(j);
  if (!r)
    return Status::ok();
  const sched::Placement &pl = r->schedule.placement;
  if (r->chosenKind == "auto")
    o.placement = pl.numStages == 2 * pl.numRanks ? "v" : "linear";
  else
    o.schedule = r->chosenKind;
  std::string n = r->autoResult ? r->autoResult->note : "";
  size_t at = n.find("placement any: ");
  note = at == std::string::npos ? n : n.substr(at + 15);
  return Status::ok();
}

Status checkModelFits(ModuleOp module, const CompileOptions &o) {
  auto model = module.lookupSymbol<func::FuncOp>("model");
  if (!model)
    return Status::error("no func.func @model (docs/model-ir.md)");
  auto layout =
      sched::stageLayoutFor(o.schedule, o.ranks, o.chunks, o.placement == "v");
  if (!layout)
    return layout.status();
  int layers = countLayers(module);
  if (layout->stages > layers)
    return Status::error(
        o.schedule + " on " + std::to_string(o.ranks) + " ranks needs " +
        std::to_string(layout->stages) + " stages but the model has only " +
        std::to_string(layers) + " layers to cut");
  return Status::ok();
}

Status planCompile(ModuleOp module, CompileOptions &o,
                   llvm::function_ref<void(llvm::StringRef)> note) {
  if (Status s = resolveCompileOptions(o); !s)
    return s;
  std::string memoryNote;
  if (Status s = detail::fitDeviceMemory(module, o, memoryNote); !s)
    return s;
  if (!memoryNote.empty() && note)
    note(memoryNote);
  std::string autoNote;
  if (Status s = chooseAutoPlacement(module, o, autoNote); !s)
    return s;
  if (!autoNote.empty() && note)
    note("--schedule auto: " + autoNote);
  return checkModelFits(module, o);
}

void buildCompilePipeline(OpPassManager &pm, const CompileOptions &o) {
  auto layout =
      sched::stageLayoutFor(o.schedule, o.ranks, o.chunks, o.placement == "v");
  addStagePasses(pm, o, layout ? layout->stages : o.ranks,
                 layout ? layout->placement : "linear");
  if (o.fuseOverlap)
    pm.addPass(pp::createPPSplitComponents());
  pp::PPScheduleOptions sch;
  sch.kind = o.schedule;
  sch.microbatches = o.microbatches;
  sch.chunks = o.chunks;
  // A pipeline's placement decides; "any" is resolved before
  // (chooseAutoPlacement), else it means the linear partition here.
  sch.autoPlacement = o.placement == "v" ? "v" : "linear";
  if (o.schedule == "auto")
    sch.memLimit = o.memLimit;
  sch.bytesPerElement = detail::activationBytesPerElement(o);
  pm.addPass(pp::createPPSchedule(sch));
  pm.addPass(pp::createPPInsertComm());
  // ZeRO-3: each stage's parameters gathered before its first compute on a
  // rank and released after its last (the runtime executes them).
  if (o.zero == 3) {
    pp::PPInsertParamGathersOptions pg;
    pg.prefetch = o.paramPrefetch;
    pm.addPass(pp::createPPInsertParamGathers(pg));
  }
  // Activation offload: the stashes that leave the device between their F
  // and their B, as actions the runtime executes.
  if (o.offloadActivations != "off") {
    pp::PPInsertOffloadOptions po;
    po.mode = o.offloadActivations;
    pm.addPass(pp::createPPInsertOffload(po));
  }
  pp::PPVerifyScheduleOptions ver;
  ver.memLimit = o.memLimit;
  ver.bytesPerElement = detail::activationBytesPerElement(o);
  pm.addPass(pp::createPPVerifySchedule(ver));
  // Component programs for the overlapped pairs (from the stages'
  // pp.components) and early receive posts; the pass re-verifies.
  if (o.fuseOverlap && o.schedule != "none")
    pm.addPass(pp::createPPFuseOverlap());
  // Program preparation (Target/Program/Prepare.h): the component ranges
  // and the buffer assignment the lowering reads.
  pm.addPass(target::createPPComponentRanges());
  pm.addPass(target::createPPAssignBuffers());
}

} // namespace pipeforge::pipelines

