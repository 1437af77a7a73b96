//===- NNInterfaces.h - cost model and backward rules -----------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_NN_IR_NNINTERFACES_H
#define PIPEFORGE_DIALECT_NN_IR_NNINTERFACES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpDefinition.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include "pipeforge/Dialect/NN/IR/NNInterfaces.h.inc"

#endif
