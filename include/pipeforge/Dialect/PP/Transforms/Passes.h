//===- Passes.h - pp dialect passes -----------------------------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_PP_TRANSFORMS_PASSES_H
#define PIPEFORGE_DIALECT_PP_TRANSFORMS_PASSES_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"

namespace pipeforge::pp {

#define GEN_PASS_DECL
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "pipeforge/Dialect/PP/Transforms/Passes.h.inc"

} // namespace pipeforge::pp

#endif
