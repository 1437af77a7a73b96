//===- ModelLoader.h - A model file (config.json or nn IR) to a module ----===//
//
// The one entry of every tool that starts from a model: a `.json` path is a
// Hugging Face style config.json, imported (ModelConfig + ModelBuilder), and
// so is a directory (a Hugging Face model directory: its config.json; the
// model is named after the directory); the config's text is recorded on
// @model (attrs::kHFConfig);
// anything else (including "-", standard input) is nn IR text, parsed with
// its diagnostics reported through the source manager.
//
//===----------------------------------------------------------------------===//
#ifndef PIPEFORGE_IMPORT_MODELLOADER_H
#define PIPEFORGE_IMPORT_MODELLOADER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/SourceMgr.h"

#include <string>

namespace pipeforge::import {

struct LoadOptions {
  int64_t seqLen = 0;         ///< config.json: 0 = the model's maximum
  int64_t microbatchSize = 1; ///< config.json: sequences per microbatch
  std::string name;           ///< the model's name; empty: the file's stem
};

/// True when `path` names a config.json (by its extension) or a directory.
bool isConfigPath(llvm::StringRef path);

/// Reads and loads `path` into `ctx` (the nn, func, arith and tensor
/// dialects must be available). `srcMgr` must be empty: the file becomes its
/// main buffer and stays there so that later
/// diagnostics can point into it. Errors: a message (the caller prefixes
/// the tool name); IR parse errors were already reported through a
/// SourceMgrDiagnosticHandler the caller installed on `ctx`, and the
/// message says so.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
loadModel(llvm::StringRef path, mlir::MLIRContext *ctx, llvm::SourceMgr &srcMgr,
          const LoadOptions &opts = {});

} // namespace pipeforge::import

#endif
