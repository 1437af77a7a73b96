//===- CompilePipeline.h - The compile pass pipeline, built once -*- C++
//-*-===//
//
// nn IR -> schedule-level pp IR (docs/compile.md, docs/architecture.md):
//
//   pp-partition{stages placement ranks} -> pp-split-backward
//   [-> pp-split-components] -> pp-schedule{kind microbatches [mem-limit]}
//   -> pp-insert-comm -> pp-verify-schedule{[mem-limit]} [-> pp-fuse-overlap]
//   -> pp-component-ranges -> pp-assign-buffers (program preparation)
//
// built by one function from CompileOptions, used by pipeforge-compile and
// registered as the named pipeline `pp-compile` so that
//
//   pipeforge-opt model.mlir --pp-compile="schedule=zbv ranks=2 microbatches=8"
//
// runs exactly what `pipeforge-compile --schedule zbv --ranks 2
// --microbatches 8` runs before it lowers (the lowering is
// Target/Program's translation).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PIPELINES_COMPILEPIPELINE_H
#define PIPEFORGE_PIPELINES_COMPILEPIPELINE_H

#include "pipeforge/Schedule/Action.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

#include <string>
#include <vector>

namespace pipeforge::pipelines {

struct CompileOptions {
  /// A schedule kind (gpipe 1f1b interleaved zb-h1 zb-h2 zbv dualpipe
  /// dualpipev chimera auto) or "none", the single-process reference.
  std::string schedule = "1f1b";
  /// Pipeline ranks; 0: 2 (none: 1).
  int ranks = 0;
  /// Microbatches per step (DualPipe: over both copies); 0: the smallest the
  /// schedule accepts (none: 1).
  int microbatches = 0;
  /// Interleaved 1F1B: model chunks per rank.
  int chunks = 2;
  /// auto: the placement, any (chooseAutoPlacement picks it), linear or v.
  std::string placement = "any";
  /// Per-rank activation limit (M_B units, <k>p, or bytes: 12GB, 512MiB):
  /// the auto scheduler's constraint, and checked by pp-verify-schedule.
  std::string memLimit;
  /// pp-split-components and pp-fuse-overlap: fused F&B pairs.
  bool fuseOverlap = false;
  /// nn-shard-tensor: the tensor-parallel group size (1: none) and
  /// sequence parallelism.
  int tp = 1;
  bool sequenceParallel = false;
  /// pp-recompute: "none", "full" (stash stage inputs only) or "selective"
  /// (recompute norms, activation functions and dropouts). "true" and ""
  /// are read as "full", "false" as "none".
  std::string recompute = "none";
  /// The stages (indices of a model copy's stages) `recompute` applies to;
  /// empty: every stage.
  std::vector<int64_t> recomputeStages;
};

/// Fills the defaults and checks the options against each other (an unknown
/// schedule, ranks < 1, DualPipe with an odd rank count, too few
/// microbatches, a malformed memory limit, placement other than linear/v).
/// Errors name the option.
sched::Status resolveCompileOptions(CompileOptions &o);

/// --schedule auto --placement any (the default): chooses what to compile
/// as pipeforge-sched --schedule auto would for the model's M_B (the search
/// on the linear and the V placement and every single-copy handcrafted
/// order under the memory limit, uniform stages, times per rank's share):
/// sets o.placement to the winning search's placement, or o.schedule to the
/// handcrafted kind that won; `note` names it. When no candidate fits,
/// o.placement becomes linear and the pipeline reports why. A no-op for
/// other options.
sched::Status chooseAutoPlacement(mlir::ModuleOp module, CompileOptions &o,
                                  std::string &note);

/// Checks that the model in `module` (func @model, nn.layer on its ops) has
/// at least as many layers as the resolved options need stages: a message
/// naming the schedule and both counts, before pp-partition would fail.
sched::Status checkModelFits(mlir::ModuleOp module, const CompileOptions &o);

/// Adds the pipeline for resolved options to `pm` (a module pass manager).
void buildCompilePipeline(mlir::OpPassManager &pm, const CompileOptions &o);

/// Registers `pp-compile` with the options schedule, ranks, microbatches,
/// chunks, placement, mem-limit, fuse-overlap.
void registerCompilePipeline();

} // namespace pipeforge::pipelines

#endif // PIPEFORGE_PIPELINES_COMPILEPIPELINE_H
