//===- NNDialect.h - The nn dialect -----------------------------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_NN_IR_NNDIALECT_H
#define PIPEFORGE_DIALECT_NN_IR_NNDIALECT_H

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Dialect.h"

#include "pipeforge/Dialect/NN/IR/NNOpsDialect.h.inc"

#endif
