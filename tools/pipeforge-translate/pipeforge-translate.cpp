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

#include "pipeforge/Support/InputFile.h"
#include "pipeforge/Support/ToolHelp.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

#include <sys/stat.h>

int main(int argc, char **argv) {
  // The input must be a regular file or standard input
  // (Support/InputFile.h): mlirTranslateMain would block opening a FIFO
  // and read a device such as /dev/zero forever, so an argument that is
  // not an option (nor -o's value) and names an existing FIFO, device or
  // directory is refused by name first. A missing or unreadable file is
  // left to mlirTranslateMain, which reports it.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-o") {
      ++i;
      continue;
    }
    struct stat st;
    if (a.empty() || a[0] == '-' || ::stat(a.c_str(), &st) != 0 ||
        S_ISREG(st.st_mode))
      continue;
    if (std::string problem = pipeforge::inputFileProblem(a);
        !problem.empty()) {
      llvm::errs() << "pipeforge-translate: error: " << problem << "\n";
      return 1;
    }
  }
  pipeforge::target::registerToProgramTranslation();
  // LLVM's own options (codegen, profiling, targets) are registered before
  // main: --help-hidden. mlirTranslateMain registers the translations and
  // its general options (-o, --split-input-file, ...) after this.
  pipeforge::hideForeignOptions({});
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "PipeForge translation tool"));
}
