//===- pipeforge-translate.cpp - mlir-translate for PipeForge -------------===//
//
//   pipeforge-translate --pp-to-program sched.mlir -o prog.pfp
//   pipeforge-translate --pp-to-program-dump sched.mlir
//
// The translations out of MLIR (docs/compile.md): a schedule-level pp
// module to the runtime's program file or its listing (the compile
// driver's lower phase, Pipelines/CompilePipeline.h). mlirTranslateMain's
// steps, with the tools' conventions: a bad flag is a usage error (exit 2,
// Support/ToolHelp.h), and the input must be a regular file or standard
// input (Support/InputFile.h: a FIFO or a device is refused by name rather
// than read forever).
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Pipelines/CompilePipeline.h"

#include "pipeforge/Support/InputFile.h"
#include "pipeforge/Support/OutputFile.h"
#include "pipeforge/Support/ToolHelp.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

using namespace llvm;

static cl::OptionCategory cat("pipeforge-translate options");
static cl::opt<std::string> inputFilename(cl::Positional,
                                          cl::desc("<input file>"),
                                          cl::init("-"), cl::cat(cat));
static cl::opt<std::string> outputFilename("o", cl::desc("Output filename"),
                                           cl::value_desc("filename"),
                                           cl::init("-"), cl::cat(cat));

static int fail(const Twine &msg) {
  errs() << "pipeforge-translate: error: " << msg << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  pipeforge::pipelines::registerToProgramTranslation();
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  mlir::registerTranslationCLOptions();
  cl::opt<const mlir::Translation *, false, mlir::TranslationParser>
      translation("", cl::desc("Translation to perform"), cl::Required,
                  cl::cat(cat));
  // LLVM's own options (codegen, profiling, targets): --help-hidden.
  pipeforge::hideForeignOptions({&cat});
  pipeforge::parseToolCommandLine(argc, argv, "PipeForge translation tool");

  std::string text, error;
  if (!pipeforge::readInputFile(inputFilename, text, error))
    return fail(error);
  auto output = mlir::openOutputFile(outputFilename, &error);
  if (!output)
    return fail(error);

  auto sourceMgr = std::make_shared<SourceMgr>();
  sourceMgr->AddNewSourceBuffer(
      MemoryBuffer::getMemBufferCopy(text, inputFilename), SMLoc());
  mlir::MLIRContext context;
  context.allowUnregisteredDialects(false);
  context.printOpOnDiagnostic(false);
  mlir::SourceMgrDiagnosticHandler diagnostics(*sourceMgr, &context);
  if (mlir::failed((*translation)(sourceMgr, output->os(), &context))) {
    // The partial file goes; a write error is not reported twice.
    output->os().clear_error();
    return 1;
  }
  if (auto err = pipeforge::finishOutput(*output))
    return fail(*err);
  return 0;
}
