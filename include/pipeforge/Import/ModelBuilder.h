//===- ModelBuilder.h - nn IR for a model configuration ---------*- C++ -*-===//
//
// Builds `func.func @model` in the nn dialect from a validated ModelConfig,
// following docs/model-ir.md: tokens and targets first, then the parameters
// (nn.role, nn.name, nn.init), every op tagged with nn.layer.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_IMPORT_MODELBUILDER_H
#define PIPEFORGE_IMPORT_MODELBUILDER_H

#include "pipeforge/Import/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace pipeforge::import {

/// Builds the model module; `loc` is attached to every op. The context must
/// have the func and nn dialects loaded.
mlir::OwningOpRef<mlir::ModuleOp> buildModel(const ModelConfig &config,
                                             mlir::MLIRContext *ctx,
                                             mlir::Location loc);

} // namespace pipeforge::import

#endif
