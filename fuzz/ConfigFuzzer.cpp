//===- ConfigFuzzer.cpp - config.json -> nn IR ----------------------------===//
//
// What pipeforge-import does: parseModelConfig, then (for a model small
// enough to build in milliseconds) buildModel and mlir::verify. A config
// that parses but builds IR that does not verify is an importer bug.
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/Dialect/Dialects.h"
#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <memory>

using namespace pipeforge;

namespace {
/// One context for many inputs (types and attributes are uniqued in it
/// forever: a fresh one every 1000 inputs keeps the memory bounded).
mlir::MLIRContext &context() {
  static std::unique_ptr<mlir::MLIRContext> ctx;
  static unsigned uses = 0;
  if (!ctx || ++uses % 1000 == 0) {
    mlir::DialectRegistry registry;
    registerPipeForgeDialects(registry);
    ctx = std::make_unique<mlir::MLIRContext>(
        registry, mlir::MLIRContext::Threading::DISABLED);
    ctx->loadAllAvailableDialects();
    ctx->printOpOnDiagnostic(false);
  }
  return *ctx;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  // seq-len 0: the model's maximum positions; one row per microbatch.
  auto config = import::parseModelConfig(text, /*seqLen=*/0, /*batch=*/1);
  if (!config) {
    llvm::consumeError(config.takeError());
    return 0;
  }
  // The IR grows with layers x experts; the sizes only live in types.
  int64_t blocks = config->numLayers * std::max<int64_t>(1, config->numExperts);
  if (blocks > 64)
    return 0;
  mlir::MLIRContext &ctx = context();
  mlir::ScopedDiagnosticHandler quiet(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  auto module = import::buildModel(*config, &ctx, mlir::UnknownLoc::get(&ctx));
  if (!module)
    fuzz::invariantBroken("buildModel returned no module for a valid config");
  if (mlir::failed(mlir::verify(*module)))
    fuzz::invariantBroken("the imported model does not verify");
  return 0;
}
