//===- ModelLoader.cpp - A model file (config.json or nn IR) to a module --===//

#include "pipeforge/Import/ModelLoader.h"

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace pipeforge::import {

bool isConfigPath(StringRef path) { return path.ends_with(".json"); }

Expected<mlir::OwningOpRef<mlir::ModuleOp>> loadModel(StringRef path,
                                                      mlir::MLIRContext *ctx,
                                                      SourceMgr &srcMgr,
                                                      const LoadOptions &opts) {
  auto buffer = MemoryBuffer::getFileOrSTDIN(path);
  if (!buffer)
    return createStringError(path +
                             ": cannot read: " + buffer.getError().message());
  unsigned id = srcMgr.AddNewSourceBuffer(std::move(*buffer), SMLoc());
  StringRef text = srcMgr.getMemoryBuffer(id)->getBuffer();
  if (!isConfigPath(path)) {
    // The buffer just added is the main one of a fresh source manager.
    auto module = mlir::parseSourceFile<mlir::ModuleOp>(srcMgr, ctx);
    if (!module)
      return createStringError(path + ": cannot parse the nn IR");
    return std::move(module);
  }
  auto config = parseModelConfig(text, opts.seqLen, opts.microbatchSize);
  if (!config)
    return createStringError(path + ": " + toString(config.takeError()));
  config->name = !opts.name.empty() ? opts.name
                 : path == "-"      ? std::string("model")
                                    : sys::path::stem(path).str();
  auto loc = mlir::FileLineColLoc::get(ctx, path, 1, 1);
  auto module = buildModel(*config, ctx, loc);
  if (mlir::failed(mlir::verify(*module)))
    return createStringError("internal error: the imported model of " + path +
                             " does not verify");
  return std::move(module);
}

} // namespace pipeforge::import
