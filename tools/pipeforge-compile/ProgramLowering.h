//===- ProgramLowering.h - Schedule-level IR to a runtime Program -*- C++ -*-===//
//
// The last step of pipeforge-compile: a module holding a split pp.pipeline
// (docs/split-backward.md) and its pp.schedule becomes an rt::Program
// (docs/program-format.md): one Function per stage body, one Kernel per nn
// op, a liveness-based buffer assignment, the params and the schedule.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_TOOLS_COMPILE_PROGRAMLOWERING_H
#define PIPEFORGE_TOOLS_COMPILE_PROGRAMLOWERING_H

#include "pipeforge/rt/Program.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <optional>

namespace pipeforge::compile {

struct LowerOptions {
  rt::ModelInfo model;       ///< name and vocab; seqLen/microbatchSize derived
  rt::TrainingInfo training; ///< schedule, dp, seed; ranks/microbatches derived
  /// Use this schedule instead of the module's pp.schedule (the unpipelined
  /// reference `none`).
  std::optional<sched::Schedule> schedule;
  /// Lower the ops' pp.component / pp.layer (--pp-split-components) into
  /// each function's ComponentRanges: consecutive kernels with the same
  /// (kind, layer) form one range; "combine" and "dispatch" count as "mlp"
  /// (an nn.moe kernel runs its own all-to-alls). A function with an
  /// untagged kernel, or whose ranges are out of layer order, gets none (a
  /// warning says why).
  bool components = false;
};

/// Lowers `module`. Errors are emitted as diagnostics at the offending op.
mlir::FailureOr<rt::Program> lowerToProgram(mlir::ModuleOp module,
                                            const LowerOptions &opts);

/// Greedy interval reuse by exact byte size. `def[v]` / `lastUse[v]` are
/// positions (def <= lastUse); values share a buffer only when one's last
/// use is before the other's definition. Fills f.buffer / f.bufferBytes.
void assignBuffers(rt::Function &f, const std::vector<int32_t> &def,
                   const std::vector<int32_t> &lastUse);

} // namespace pipeforge::compile

#endif
