//===- ProgramLowering.h - Schedule-level IR to a runtime Program -*- C++ -*-===//
//
// The last step of the compile flow (docs/architecture.md): a module holding
// a split pp.pipeline (docs/split-backward.md) and its pp.schedule becomes an
// rt::Program (docs/program-format.md): one Function per stage body, one
// Kernel per nn op, a liveness-based buffer assignment, the params and the
// schedule. The buffer assignment and the component ranges are read from
// the IR when the preparation passes recorded them (--pp-assign-buffers,
// --pp-component-ranges; Prepare.h), else computed with the same code.
// The compile driver's lower phase (Pipelines/CompilePipeline.h:
// lowerCompiled, which pipeforge-compile and pipeforge-translate's
// --pp-to-program run) calls lowerToProgram and validates its result.
//
// What the lowering reads from the IR: the model's name and vocabulary from
// the pipeline's nn.model_name / nn.vocab_size (the importer's facts, carried
// by pp-partition), the schedule from pp.schedule, the component ranges from
// the ops' pp.component / pp.layer (present only after pp-split-components).
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_TARGET_PROGRAM_PROGRAMLOWERING_H
#define PIPEFORGE_TARGET_PROGRAM_PROGRAMLOWERING_H

#include "pipeforge/rt/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <optional>

namespace pipeforge::target {

struct LowerOptions {
  /// Name and vocabulary when the IR does not record them (nn.model_name,
  /// nn.vocab_size on the pipeline); seqLen / microbatchSize come from the
  /// tokens' type.
  rt::ModelInfo model;
  /// dp, ep, seed; the schedule name, ranks and microbatches come from the
  /// pp.schedule (or `schedule`).
  rt::TrainingInfo training;
  /// Use this schedule instead of the module's pp.schedule (the unpipelined
  /// reference `none`).
  std::optional<sched::Schedule> schedule;
};

/// Lowers `module`. Errors are emitted as diagnostics at the offending op:
/// among them, training.expertParallel > 1 that does not divide an nn.moe
/// layer's expert count, or a model without nn.moe.
///
/// Component ranges: a function's pp.component_ranges when present, else,
/// when the ops carry pp.component / pp.layer (--pp-split-components),
/// computeComponentRanges (Prepare.h): consecutive kernels with the same
/// (kind, layer) form one range; "combine" and "dispatch" count as "mlp" (an
/// nn.moe kernel runs its own all-to-alls). A function with an untagged
/// kernel, or whose ranges are out of layer order, gets none (a warning says
/// why). Buffers: a function's pp.buffers / pp.buffer when present (an
/// assignment that does not fit the values is an error), else
/// computeBufferPlan.
mlir::FailureOr<rt::Program> lowerToProgram(mlir::ModuleOp module,
                                            const LowerOptions &opts);

/// Greedy interval reuse by exact byte size. `def[v]` / `lastUse[v]` are
/// positions (def <= lastUse); values share a buffer only when one's last
/// use is before the other's definition. Fills f.buffer / f.bufferBytes.
void assignBuffers(rt::Function &f, const std::vector<int32_t> &def,
                   const std::vector<int32_t> &lastUse);

} // namespace pipeforge::target

#endif // PIPEFORGE_TARGET_PROGRAM_PROGRAMLOWERING_H
