//===- Dialects.h - Every dialect a PipeForge module may hold ---*- C++ -*-===//
//
// nn and pp, and the upstream dialects their bodies use (func, arith,
// tensor). The one list that the tools, the program translation, the
// fuzzers and the tests register.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_DIALECT_DIALECTS_H
#define PIPEFORGE_DIALECT_DIALECTS_H

#include "pipeforge/Dialect/NN/IR/NNDialect.h"
#include "pipeforge/Dialect/PP/IR/PPDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"

namespace pipeforge {

inline void registerPipeForgeDialects(mlir::DialectRegistry &registry) {
  registry.insert<nn::NNDialect, pp::PPDialect, mlir::func::FuncDialect,
                  mlir::arith::ArithDialect, mlir::tensor::TensorDialect>();
}

} // namespace pipeforge

#endif // PIPEFORGE_DIALECT_DIALECTS_H
