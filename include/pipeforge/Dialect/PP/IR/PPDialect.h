//===- PPDialect.h - The pp dialect -----------------------------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_PP_IR_PPDIALECT_H
#define PIPEFORGE_DIALECT_PP_IR_PPDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "pipeforge/Dialect/PP/IR/PPOpsDialect.h.inc"

#endif
