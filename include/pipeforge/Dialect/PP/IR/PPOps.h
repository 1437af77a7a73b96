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

#endif
