//===- PassPipelineFuzzer.cpp - nn/pp IR through the pass pipelines -------===//
//
// MLIR text in the nn and pp dialects (with func, arith, tensor: what
// pipeforge-opt registers), parsed, verified, then one fixed pipeline:
//
//   a module with func.func @model (nn level): the compile driver's plan
//     and pipeline phases (pipelines::compileModule, stopped after the
//     pipeline) with one of six fixed settings,
//     picked by the input size (1f1b, zbv, dualpipev with fused pairs,
//     interleaved, 1f1b with tp=2, zbv with tp=2 and sequence parallelism;
//     2 ranks, 4 microbatches);
//   anything else (pp level): pp-split-backward, pp-schedule{kind=1f1b
//     microbatches=4}, pp-insert-comm, pp-verify-schedule.
//
// What passes is lowered to an rt::Program (target::lowerToProgram, as
// pipeforge-compile and pipeforge-translate --pp-to-program do); a lowered
// program with a vocabulary that the validator rejects is a lowering bug
// (pipeforge-compile's "internal error").
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "pipeforge/Dialect/Dialects.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Pipelines/CompilePipeline.h"
#include "pipeforge/Target/Program/ProgramLowering.h"
#include "pipeforge/rt/Program.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <string>
#include <memory>

using namespace pipeforge;

namespace {
/// One context for many inputs, renewed every 500 (uniqued types and
/// attributes are never freed).
mlir::MLIRContext &context() {
  static std::unique_ptr<mlir::MLIRContext> ctx;
  static unsigned uses = 0;
  if (!ctx || ++uses % 500 == 0) {
    mlir::DialectRegistry registry;
    registerPipeForgeDialects(registry);
    ctx = std::make_unique<mlir::MLIRContext>(
        registry, mlir::MLIRContext::Threading::DISABLED);
    ctx->loadAllAvailableDialects();
    ctx->printOpOnDiagnostic(false);
  }
  return *ctx;
}

pipelines::CompileOptions compileOptions(size_t variant) {
  pipelines::CompileOptions o;
  o.ranks = 2;
  o.microbatches = 4;
  switch (variant % 6) {
  case 0:
    o.schedule = "1f1b";
    break;
  case 1:
    o.schedule = "zbv";
    break;
  case 2:
    o.schedule = "dualpipev";
    o.fuseOverlap = true;
    break;
  case 3:
    o.schedule = "interleaved";
    break;
  case 4: // tensor parallelism (nn-shard-tensor first)
    o.schedule = "1f1b";
    o.tp = 2;
    break;
  default:
    o.schedule = "zbv";
    o.tp = 2;
    o.sequenceParallel = true;
    break;
  }
  pipelines::CompileOptions resolved = o;
  if (!pipelines::resolveCompileOptions(resolved))
    fuzz::invariantBroken("fixed compile options do not resolve");
  return o;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > fuzz::kMaxInput)
    return 0;
  static bool registered = [] {
    pp::registerPPPasses();
    return true;
  }();
  (void)registered;
  mlir::MLIRContext &ctx = context();
  mlir::ScopedDiagnosticHandler quiet(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  // MLIR's lexer reads the byte after the text (a source file's buffer is
  // null-terminated, as pipeforge-opt's and pipeforge-translate's are): a
  // copy with its terminator, never the fuzzer's bare bytes.
  std::string owned(reinterpret_cast<const char *>(data), size);
  llvm::StringRef text(owned);
  mlir::ParserConfig config(&ctx);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(text, config);
  if (!module)
    return 0;

  if (module->lookupSymbol("model")) {
    pipelines::CompileOptions o = compileOptions(size);
    pipelines::CompileResult result;
    if (!pipelines::compileModule(std::move(module), o, result,
                                  pipelines::CompilePhase::Pipeline))
      return 0;
    module = std::move(result.module);
  } else {
    mlir::PassManager pm(&ctx);
    if (mlir::failed(mlir::parsePassPipeline(
            "pp-split-backward,pp-schedule{kind=1f1b microbatches=4},"
            "pp-insert-comm,pp-verify-schedule",
            pm)))
      fuzz::invariantBroken("the fixed pp pipeline does not parse");
    if (mlir::failed(pm.run(*module)))
      return 0;
  }

  target::LowerOptions lo;
  lo.model.name = "fuzz";
  auto prog = target::lowerToProgram(*module, lo);
  if (mlir::failed(prog))
    return 0;
  // IR without nn.vocab_size (hand-written, not imported) lowers to
  // vocab 0, which the validator refuses by design (pipeforge-translate
  // reports it as an error): not a lowering bug.
  if (prog->model.vocab <= 0)
    return 0;
  if (rt::Status st = rt::validateProgram(*prog); !st)
    fuzz::invariantBroken("the lowered program is invalid: " + st.message());
  return 0;
}
