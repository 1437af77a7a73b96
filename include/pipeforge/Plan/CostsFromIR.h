//===- CostsFromIR.h - The planner's model costs from nn IR -----*- C++ -*-===//
//
// The bridge between an nn model (func @model, as pipeforge-import writes it)
// and the planner (Planner.h, plain C++): per-layer costs from the nn cost
// analysis (nn/Analysis/CostSum.h) and what tensor parallelism and
// recomputation need beyond them (layer kinds, the model's shape). Built as
// its own library (PipeForgePlanFromIR) so that PipeForgePlan stays free of
// MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_PLAN_COSTSFROMIR_H
#define PIPEFORGE_PLAN_COSTSFROMIR_H

#include "pipeforge/Plan/Planner.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace pipeforge::plan {

/// Per-layer costs of func @model in `module`, divided by its batch (the
/// leading dimension of the argument with nn.role = "tokens") to get
/// per-sequence numbers. `name` is the model's name when the IR carries none
/// (kModelName); `bytesPerElement` the activation element size.
llvm::Expected<ModelCosts> costsFromIR(mlir::ModuleOp module,
                                       llvm::StringRef name,
                                       unsigned bytesPerElement);

/// Loads a model as pipeforge-plan names it (a config.json through the
/// importer, an nn .mlir, or "-": nn IR on stdin; parse errors go to stderr)
/// and returns costsFromIR of it. `seqLen` > 0: the sequence length (a
/// config.json is built with it; an .mlir must have it).
llvm::Expected<ModelCosts> loadModelCosts(llvm::StringRef path,
                                          int64_t seqLen,
                                          unsigned bytesPerElement);

} // namespace pipeforge::plan

#endif // PIPEFORGE_PLAN_COSTSFROMIR_H
