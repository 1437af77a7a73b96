//===- NNOps.h - nn dialect ops ---------------------------------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_NN_IR_NNOPS_H
#define PIPEFORGE_DIALECT_NN_IR_NNOPS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/NN/IR/NNInterfaces.h"

#define GET_OP_CLASSES
#include "pipeforge/Dialect/NN/IR/NNOps.h.inc"

#endif
