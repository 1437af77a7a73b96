//===- pipeforge-import.cpp - HF-style config.json to nn IR ---------------===//
//
//   pipeforge-import config.json --seq-len 64 --microbatch-size 2 -o model.mlir
//
// Reads a GPT-2, Llama or Mixtral config and writes the model in the nn
// dialect (docs/model-ir.md). A bad config is an error naming the key, with
// exit code 1; a bad flag is a usage error, exit code 2.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"
#include "pipeforge/Pipelines/CompilePipeline.h"
#include "pipeforge/Support/InputFile.h"
#include "pipeforge/Support/OutputFile.h"
#include "pipeforge/Support/ToolHelp.h"

#include "pipeforge/Dialect/Dialects.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;

static cl::OptionCategory cat("pipeforge-import options");
static cl::opt<std::string> inputPath(cl::Positional, cl::desc("<config.json>"),
                                      cl::Required, cl::cat(cat));
static cl::opt<std::string>
    outputPath("o", cl::desc("Output file (default: stdout)"),
               cl::value_desc("file"), cl::init("-"), cl::cat(cat));
// --seq-len and --microbatch-size: the compile's load options, declared
// once (pipelines::forEachCompileOption), as pipeforge-compile has them.
static pipeforge::pipelines::CompileFlags
    loadFlags(cat, {pipeforge::pipelines::OptionPhase::Load});

static int fail(const Twine &msg) {
  WithColor::error(errs(), "pipeforge-import")
      << inputPath << ": " << msg << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  pipeforge::hideForeignOptions({&cat});
  pipeforge::parseToolCommandLine(
      argc, argv, "PipeForge model importer: config.json -> nn IR\n");

  // A regular file or standard input (Support/InputFile.h): a directory,
  // a FIFO or a device is refused by name before it is opened, and a read
  // error part way is an error (not a shorter input).
  std::string text, readError;
  if (!pipeforge::readInputFile(inputPath, text, readError)) {
    WithColor::error(errs(), "pipeforge-import") << readError << "\n";
    return 1;
  }
  pipeforge::pipelines::CompileOptions load;
  loadFlags.apply(load);
  auto config = pipeforge::import::parseModelConfig(text, load.seqLen,
                                                    load.microbatchSize);
  if (!config)
    return fail(toString(config.takeError()));
  config->name = inputPath == "-" ? "model" : sys::path::stem(inputPath).str();

  mlir::DialectRegistry registry;
  pipeforge::registerPipeForgeDialects(registry);
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  auto loc = mlir::FileLineColLoc::get(&ctx, inputPath, 1, 1);
  auto module = pipeforge::import::buildModel(*config, &ctx, loc);
  if (mlir::failed(mlir::verify(*module)))
    return fail("internal error: the generated model does not verify");

  std::string error;
  auto out = mlir::openOutputFile(outputPath, &error);
  if (!out)
    return fail(error);
  module->print(out->os());
  if (auto err = pipeforge::finishOutput(*out))
    return fail(*err);
  return 0;
}
