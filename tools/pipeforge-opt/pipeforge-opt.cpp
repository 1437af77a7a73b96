//===- pipeforge-opt.cpp - The PipeForge optimizer driver -----------------===//
//
// mlir-opt for PipeForge: the nn and pp dialects, func/arith/tensor, and
// every pass the project defines (registered one by one: no InitAll*).
//
//===----------------------------------------------------------------------===//

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"

#include "pipeforge/Dialect/Dialects.h"
#include "pipeforge/Dialect/NN/Transforms/Passes.h"
#include "pipeforge/Dialect/PP/Transforms/Passes.h"
#include "pipeforge/Pipelines/CompilePipeline.h"
#include "pipeforge/Support/InputFile.h"
#include "pipeforge/Support/OutputFile.h"
#include "pipeforge/Support/ToolHelp.h"
#include "pipeforge/Target/Program/Prepare.h"

// --help lists these by name, one line each; --list-passes prints them with
// their options, --help-hidden everything (LLVM's own options too).
// test/Docs/help.test checks this list against --list-passes.
static const char *const helpPasses[] = {
    "pp-compile",          "nn-shard-tensor",
    "pp-partition",        "pp-schedule",
    "pp-insert-comm",      "pp-insert-param-gathers",
    "pp-insert-offload",   "pp-verify-schedule",
    "pp-simulate",         "pp-split-backward",
    "pp-recompute",        "pp-split-components",
    "pp-fuse-overlap",     "pp-assign-buffers",
    "pp-component-ranges", "nn-cost-report",
    "canonicalize",        "cse",
    "symbol-dce"};

static std::string passSummary() {
  std::string text;
  llvm::raw_string_ostream os(text);
  auto line = [&](llvm::StringRef name, llvm::StringRef desc) {
    os << "  --" << name;
    os.indent(name.size() < 22 ? 22 - name.size() : 1) << desc << "\n";
  };
  os << "\n\nPasses (with their options: --list-passes):\n";
  for (const char *name : helpPasses)
    if (const mlir::PassInfo *info = mlir::PassInfo::lookup(name))
      line(name, info->getPassDescription());
  return text;
}

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  pipeforge::registerPipeForgeDialects(registry);
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  pipeforge::pp::registerPPPasses();
  pipeforge::nn::registerNNPasses();
  pipeforge::target::registerProgramPreparePasses();
  pipeforge::pipelines::registerCompilePass();
  // MlirOptMain(argc, argv, ...) keeps its output stream's write error
  // until the destructor aborts ("LLVM ERROR: IO failure"): run its steps
  // here and check the output (pipeforge/Support/OutputFile.h).
  llvm::InitLLVM init(argc, argv);
  std::string helpHeader =
      mlir::registerCLIOptions("PipeForge optimizer driver", registry);
  // One screen of --help: the pass list above, and of MLIR's general
  // options the ones a pass author uses; the rest under --help-hidden.
  pipeforge::hideForeignOptions(
      {}, {"o", "pass-pipeline", "split-input-file", "verify-diagnostics",
           "list-passes", "show-dialects", "allow-unregistered-dialect",
           "verify-each", "dump-pass-pipeline", "mlir-print-ir-after-all",
           "mlir-print-ir-before-all", "mlir-print-op-generic",
           "mlir-print-debuginfo", "mlir-pass-statistics", "mlir-timing"});
  // mlir::parseCLIOptions with a bad flag as a usage error, exit 2, as in
  // every PipeForge tool (Support/ToolHelp.h).
  static llvm::cl::opt<std::string> inputFilename(
      llvm::cl::Positional, llvm::cl::desc("<input file>"),
      llvm::cl::init("-"));
  static llvm::cl::opt<std::string> outputFilename(
      "o", llvm::cl::desc("Output filename"),
      llvm::cl::value_desc("filename"), llvm::cl::init("-"));
  pipeforge::parseToolCommandLine(argc, argv, helpHeader + passSummary());
  mlir::MlirOptMainConfig config =
      mlir::MlirOptMainConfig::createFromCLOptions();
  if (config.shouldShowDialects() || config.shouldListPasses())
    return mlir::asMainReturnCode(
        mlir::MlirOptMain(argc, argv, inputFilename, outputFilename, registry));
  std::string error;
  // A regular file or standard input (Support/InputFile.h): a FIFO or a
  // device is refused by name before it is opened, and a read error part
  // way is an error (not a shorter input).
  std::unique_ptr<llvm::MemoryBuffer> input;
  if (inputFilename == "-") {
    input = mlir::openInputFile(inputFilename, &error);
  } else {
    std::string text;
    if (pipeforge::readInputFile(inputFilename, text, error))
      input = llvm::MemoryBuffer::getMemBufferCopy(text, inputFilename);
  }
  if (!input) {
    llvm::errs() << "pipeforge-opt: error: " << error << "\n";
    return 1;
  }
  auto output = mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << "pipeforge-opt: error: " << error << "\n";
    return 1;
  }
  if (mlir::failed(mlir::MlirOptMain(output->os(), std::move(input), registry,
                                     config))) {
    // Not kept: the partial file goes; a write error is not reported twice.
    output->os().clear_error();
    return 1;
  }
  if (auto err = pipeforge::finishOutput(*output)) {
    llvm::errs() << "pipeforge-opt: error: " << *err << "\n";
    return 1;
  }
  return 0;
}
