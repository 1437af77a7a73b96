//===- ModelLoader.cpp - A model file (config.json or nn IR) to a module --===//

#include "pipeforge/Import/ModelLoader.h"

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"

#include "pipeforge/Support/AttrNames.h"
#include "pipeforge/Support/InputFile.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace llvm;

namespace pipeforge::import {

bool isConfigPath(StringRef path) {
  return path.ends_with(".json") || sys::fs::is_directory(path);
}

Expected<mlir::OwningOpRef<mlir::ModuleOp>> loadModel(StringRef modelPath,
                                                      mlir::MLIRContext *ctx,
                                                      SourceMgr &srcMgr,
                                                      const LoadOptions &opts) {
  // A Hugging Face model directory: its config.json, named after the
  // directory.
  std::string dirConfig;
  StringRef path = modelPath;
  bool isDir = modelPath != "-" && sys::fs::is_directory(modelPath);
  if (isDir) {
    SmallString<256> p(modelPath);
    sys::path::append(p, "config.json");
    dirConfig = p.str().str();
    if (!sys::fs::exists(dirConfig))
      return createStringError(modelPath +
                               ": a directory without a config.json (a "
                               "Hugging Face model directory holds one)");
    path = dirConfig;
  }
  // A regular file or standard input (Support/InputFile.h): a FIFO or a
  // device is refused by name before it is opened, and a read error part
  // way is an error (not a shorter input).
  std::unique_ptr<MemoryBuffer> buffer;
  if (path == "-") {
    auto in = MemoryBuffer::getSTDIN();
    if (!in)
      return createStringError(path +
                               ": cannot read: " + in.getError().message());
    buffer = std::move(*in);
  } else {
    std::string text, error;
    if (!pipeforge::readInputFile(path.str(), text, error))
      return createStringError(error);
    buffer = MemoryBuffer::getMemBufferCopy(text, path);
  }
  unsigned id = srcMgr.AddNewSourceBuffer(std::move(buffer), SMLoc());
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
  config->name =
      !opts.name.empty() ? opts.name
      : isDir ? sys::path::filename(sys::path::remove_leading_dotslash(
                    modelPath.rtrim('/')))
                    .str()
      : path == "-" ? std::string("model")
                    : sys::path::stem(path).str();
  auto loc = mlir::FileLineColLoc::get(ctx, path, 1, 1);
  auto module = buildModel(*config, ctx, loc);
  // The config itself travels with the model (attrs::kHFConfig): the
  // runtime maps Hugging Face weights with it and exports it beside them.
  if (auto model = module->lookupSymbol<mlir::func::FuncOp>("model"))
    model->setAttr(pipeforge::attrs::kHFConfig,
                   mlir::StringAttr::get(ctx, text));
  if (mlir::failed(mlir::verify(*module)))
    return createStringError("internal error: the imported model of " + path +
                             " does not verify");
  return std::move(module);
}

} // namespace pipeforge::import
