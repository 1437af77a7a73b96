//===- PPOps.h - pp dialect ops ---------------------------------*- C++ -*-===//
#ifndef PIPEFORGE_DIALECT_PP_IR_PPOPS_H
#define PIPEFORGE_DIALECT_PP_IR_PPOPS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"

#include "pipeforge/Dialect/PP/IR/PPEnums.h.inc"

#define GET_OP_CLASSES
#include "pipeforge/Dialect/PP/IR/PPOps.h.inc"

namespace pipeforge::pp {
/// Checks the component program of a fused pp.overlap (no-op for a plain
/// pair): see the op's description. Emits the error at the offending op.
mlir::LogicalResult verifyComponentProgram(OverlapOp op);

/// Whether `pp.role = "<r>"` may sit on a stage function's argument
/// (act_in, data, tokens, targets, param, grad_in, loss_seed, stash, wstash)
/// or result (act_out, loss, stash, wstash, grad_out, param_grad).
bool isArgumentRole(Role r);
bool isResultRole(Role r);
/// The pp.role of `fn`'s argument / result `i`; nullopt when absent or not a
/// role name (the dialect verifier rejects the latter).
std::optional<Role> getArgRole(mlir::FunctionOpInterface fn, unsigned i);
std::optional<Role> getResultRole(mlir::FunctionOpInterface fn, unsigned i);
/// The string attribute `pp.role = "<r>"`.
mlir::StringAttr getRoleAttr(mlir::MLIRContext *ctx, Role r);
} // namespace pipeforge::pp

#endif
