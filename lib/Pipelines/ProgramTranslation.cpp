//===- ProgramTranslation.cpp - --pp-to-program for pipeforge-translate ---===//
//
// The lowering as mlir-translate style translations (docs/compile.md):
//
//   pipeforge-translate --pp-to-program sched.mlir -o prog.pfp
//   pipeforge-translate --pp-to-program-dump sched.mlir
//
// The input is a schedule-level module (after pp-schedule and
// pp-insert-comm, e.g. the output of `pipeforge-opt --pp-compile=...`). The
// run's data- and expert-parallel degrees and the initialisation seed are
// options, as pipeforge-compile's --dp, --ep and --seed. The result is
// validated before it is written.
//
//===----------------------------------------------------------------------===//

#include "pipeforge/Target/Program/ProgramLowering.h"

#include "pipeforge/Dialect/Dialects.h"
#include "pipeforge/Pipelines/CompilePipeline.h"

#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"

using namespace mlir;

namespace pipeforge::pipelines {

namespace {
llvm::cl::OptionCategory category("--pp-to-program options");

/// The compile's lowering options (--dp, --ep, --seed) as --pp-program-*.
const CompileFlags &flags() {
  static auto *f =
      new CompileFlags(category, {OptionPhase::Lowering}, "pp-program-");
  return *f;
}

FailureOr<rt::Program> lowerWithFlags(ModuleOp module) {
  CompileOptions o;
  flags().apply(o);
  if (o.dp < 1 || o.ep < 1)
    return module.emitError() << "--pp-program-dp and --pp-program-ep must "
                                 "be at least 1",
           failure();
  return lowerCompiled(module, o);
}
} // namespace

void registerToProgramTranslation() {
  flags();
  // Lowers, then writes what `emit` makes of the program.
  auto translate = [](std::string (*emit)(const rt::Program &)) {
    return [emit](ModuleOp module, raw_ostream &os) -> LogicalResult {
      auto prog = lowerWithFlags(module);
      if (failed(prog))
        return failure();
      os << emit(*prog);
      return success();
    };
  };
  static TranslateFromMLIRRegistration toProgram(
      "pp-to-program",
      "lower a schedule-level pp module to a program file (binary)",
      translate(rt::serializeProgram), registerPipeForgeDialects);
  static TranslateFromMLIRRegistration toProgramDump(
      "pp-to-program-dump",
      "lower a schedule-level pp module to a program and print its listing",
      translate(rt::dumpProgram), registerPipeForgeDialects);
}

} // namespace pipeforge::pipelines
