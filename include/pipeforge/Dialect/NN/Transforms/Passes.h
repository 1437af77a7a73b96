//===- Passes.h - nn dialect passes -----------------------------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_NN_TRANSFORMS_PASSES_H
#define PIPEFORGE_DIALECT_NN_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "pipeforge/Dialect/NN/IR/NNDialect.h"

namespace pipeforge::nn {

#define GEN_PASS_DECL
#include "pipeforge/Dialect/NN/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "pipeforge/Dialect/NN/Transforms/Passes.h.inc"

} // namespace pipeforge::nn

#endif
