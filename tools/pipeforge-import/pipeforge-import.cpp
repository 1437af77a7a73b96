//===- pipeforge-import.cpp - HF-style config.json to nn IR ---------------===//
//
//   pipeforge-import config.json --seq-len 64 --microbatch-size 2 -o model.mlir
//
// Reads a GPT-2, Llama or Mixtral config and writes the model in the nn
// dialect (docs/model-ir.md). A bad config is an error naming the key, with
// exit code 1.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Import/ModelBuilder.h"
#include "pipeforge/Import/ModelConfig.h"
#include "pipeforge/Support/InputFile.h"
#include "pipeforge/Support/OutputFile.h"
#include "pipeforge/Support/ToolHelp.h"

#include "pipeforge/Dialect/NN/IR/NNDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
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
static cl::opt<int64_t>
    seqLen("seq-len",
           cl::desc("Sequence length (default: the model's maximum positions)"),
           cl::init(0), cl::cat(cat));
static cl::opt<int64_t> microbatch("microbatch-size",
                                   cl::desc("Sequences per microbatch (b)"),
                                   cl::init(1), cl::cat(cat));

static int fail(const Twine &msg) {
  WithColor::error(errs(), "pipeforge-import")
      << inputPath << ": " << msg << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  pipeforge::hideForeignOptions({&cat});
  cl::ParseCommandLineOptions(
      argc, argv, "PipeForge model importer: config.json -> nn IR\n");

  // A regular file or standard input (Support/InputFile.h): a directory,
  // a FIFO or a device is refused by name before it is opened, and a read
  // error part way is an error (not a shorter input).
  std::string text, readError;
  if (!pipeforge::readInputFile(inputPath, text, readError)) {
    WithColor::error(errs(), "pipeforge-import") << readError << "\n";
    return 1;
  }
  auto config =
      pipeforge::import::parseModelConfig(text, seqLen, microbatch);
  if (!config)
    return fail(toString(config.takeError()));
  config->name = inputPath == "-" ? "model" : sys::path::stem(inputPath).str();

  mlir::MLIRContext ctx;
  ctx.loadDialect<pipeforge::nn::NNDialect, mlir::func::FuncDialect>();
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
