//===- PPOps.h - pp dialect ops ---------------------------------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_PP_IR_PPOPS_H
#define PIPEFORGE_DIALECT_PP_IR_PPOPS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"

#include "pipeforge/Dialect/PP/IR/PPEnums.h.inc"

#define GET_OP_CLASSES
#include "pipeforge/Dialect/PP/IR/PPOps.h.inc"

namespace pipeforge::pp {
/// Checks the component program of a fused pp.overlap (no-op for a plain
/// pair): see the op's description. Emits the error at the offending op.
mlir::LogicalResult verifyComponentProgram(OverlapOp op);
} // namespace pipeforge::pp

#endif
