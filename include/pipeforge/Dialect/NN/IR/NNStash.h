//===- NNStash.h - What an nn op keeps for its backward ---------*- C++ -*-===//
//
// The stash rules the cost model (NNCost.cpp) counts and selective
// recomputation (--pp-recompute=policy=selective) follows, in one place, so
// the planner's per-layer memory under each recomputation policy is the
// memory the compiled program keeps.
//
//===----------------------------------------------------------------------===//

#ifndef PIPEFORGE_DIALECT_NN_IR_NNSTASH_H
#define PIPEFORGE_DIALECT_NN_IR_NNSTASH_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

namespace pipeforge::nn {

/// The operands `op` keeps for its backward (linear, norms, activations:
/// the input; mul: both; attention: q, k and v; cross entropy: the logits).
llvm::SmallVector<mlir::Value> stashedOperands(mlir::Operation *op);

/// Ops selective recomputation redoes in B: no GEMM, and an output as large
/// as the input (norms, activation functions, dropout). Their stashed
/// output is dropped when every input they read is kept anyway.
bool isCheapToRecompute(mlir::Operation *op);

} // namespace pipeforge::nn

#endif // PIPEFORGE_DIALECT_NN_IR_NNSTASH_H
