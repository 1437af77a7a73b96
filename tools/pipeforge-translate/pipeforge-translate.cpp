//===- pipeforge-translate.cpp - mlir-translate for PipeForge -------------===//
//
//   pipeforge-translate --pp-to-program sched.mlir -o prog.pfp
//   pipeforge-translate --pp-to-program-dump sched.mlir
//
// The translations out of MLIR (docs/compile.md): a schedule-level pp
// module to the runtime's program file or its listing.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Target/Program/ProgramLowering.h"

#include "pipeforge/Support/ToolHelp.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  pipeforge::target::registerToProgramTranslation();
  // LLVM's own options (codegen, profiling, targets) are registered before
  // main: --help-hidden. mlirTranslateMain registers the translations and
  // its general options (-o, --split-input-file, ...) after this.
  pipeforge::hideForeignOptions({});
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "PipeForge translation tool"));
}
